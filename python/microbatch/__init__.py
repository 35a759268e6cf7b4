"""Balanced, gradient-invariant micro-batch plans for data-parallel training.

``microbatch`` is the Python face of the Rust crate of the same name: bin
packing, multiway partitioning, cost models of vision-language training, and a
planner that turns one optimizer step's samples into micro-batches over ranks x
micro-steps with the loss scale that keeps the gradient unchanged.

Quickstart:

>>> import numpy as np, microbatch
>>> planner = microbatch.Planner("qwen2.5-vl-7b", ranks=2, seq_len=4096)
>>> plan = planner.plan(ids=np.arange(8), text_tokens=[900, 120, 300, 40, 700, 60, 80, 500],
...                     image_tokens=[[1024], [], [256, 256], [], [], [576], [], []])
>>> for rank in range(plan.ranks):
...     for step in range(plan.micro_steps):
...         ids = plan.micro_batch(rank, step)  # this rank's samples at this micro-step
>>> scale = plan.loss_scale("token", "mean")  # times each micro-batch's summed loss

The trainer's contract
----------------------

The update depends only on the sum of per-sample gradients, so the planner may
move samples between ranks and micro-steps, provided that:

1. **Multiply each micro-batch's summed loss by the plan's scale**
   (:meth:`Plan.loss_scale`). Never divide by the micro-batch's own token count
   or by the number of accumulation steps: a per-micro-batch mean weights each
   sample by the size of the batch it landed in. Frameworks that divide by the
   accumulation steps must be kept from it: DeepSpeed's ``engine.backward``
   divides unless called with ``scale_wrt_gas=False``; Hugging Face's
   ``Trainer`` divides unless it is given a ``compute_loss_func`` (or the model
   takes ``num_items_in_batch``), so give it one that returns the summed loss
   times the scale.
   ``reduction="mean"`` is for an all-reduce that averages over ranks (DDP,
   FSDP and DeepSpeed by default); ``"sum"`` for one that sums.
2. **Count as loss tokens exactly the positions that carry loss**, after label
   shifting: for a sample whose labels are masked with -100 at its first
   position (the packed layout of :func:`microbatch.torch.collate_packed`), the
   positions ``t >= 1`` with ``labels[t] != -100``.
   With ``normalization="sample"``, every sample of the step counts in the
   denominator, a sample without loss tokens too: its mean loss is taken as 0
   (it adds nothing to the numerator and 1 to the denominator), exactly as in
   the unsplit reference.
3. **Every rank runs every micro-step**, even one whose micro-batch is empty
   (possible when the step has fewer samples than its ranks x micro-steps x
   sequences, or when ``micro_steps`` asks for more than the batch needs): run
   forward and backward on it with a zero loss connected to the parameters, so
   that the collectives of FSDP, ZeRO and DDP stay in step.
4. **Nothing in the model may depend on a micro-batch's composition**:
   BatchNorm statistics, an MoE auxiliary loss computed per micro-batch or
   in-batch negatives of a contrastive loss change when samples move, and no
   scale fixes them.
5. **Packed documents must not see each other.** With Hugging Face
   ``transformers`` use :class:`microbatch.hf.PackedCollator`, which makes
   ``model(**batch)`` keep them apart, and checks once that the model does:

   - ``use_cache=False`` in the batch: transformers builds the block-causal
     mask of a packed row from ``position_ids`` only when no cache is created
     and no ``attention_mask`` is given, and ``config.use_cache`` is ``True``
     by default, so without it every document attends to the ones before it;
   - multimodal RoPE (the Qwen2-VL family: a ``get_rope_index`` method):
     ``position_ids`` of shape ``(4, 1, T)``, rows 1-3 computed per document
     by the model's own ``get_rope_index`` and concatenated, row 0 the text
     positions restarting per document (transformers reads the packing from
     it; with the 3 M-RoPE rows only it does not);
   - an empty micro-batch becomes one padding document whose labels are all
     ignored: it runs, adds exactly 0 to the loss and gives every parameter a
     zero gradient; a vision model's micro-batch without images gets a padding
     document with one small image, so the vision tower runs (and DDP sees its
     gradient) on every rank;
   - a model whose attention ignores the packing (the collator's probe finds
     packed logits that differ from each document alone) is refused with
     :class:`microbatch.hf.PackingError` instead of training on leaked
     attention.

Ids are unsigned 64-bit integers; :meth:`Plan.to_json` writes them exactly,
which Python's ``json`` reads exactly, but JavaScript and any parser that reads
numbers as doubles round ids above ``2**53``.
"""

from __future__ import annotations

from . import cost, errors, pack, partition, scenario
from ._native import __version__
from .errors import (
    CapacityError,
    DtypeError,
    DuplicateIdError,
    Error,
    FitError,
    InfeasibleError,
    InputError,
    InternalError,
    InvalidValueError,
    LimitError,
    OversizeError,
    SettingError,
)
from .plan import Loss, Plan, Planner, Report

__all__ = [
    "__version__",
    "cost",
    "errors",
    "pack",
    "partition",
    "scenario",
    "Error",
    "InternalError",
    "InputError",
    "DtypeError",
    "InvalidValueError",
    "CapacityError",
    "OversizeError",
    "DuplicateIdError",
    "SettingError",
    "InfeasibleError",
    "FitError",
    "LimitError",
    "Planner",
    "Plan",
    "Report",
    "Loss",
]

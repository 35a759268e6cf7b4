"""Hugging Face ``transformers`` integration: packed micro-batches that ``model(**batch)`` keeps apart.

``microbatch.hf`` needs PyTorch and transformers (``pip install "microbatch[hf]"``);
``import microbatch`` alone imports neither.

- :class:`PackedCollator` (the ``collate_fn``) packs a micro-batch into one
  row for ``model(**batch)``, correct for text LMs (Llama, Qwen2, Mistral,
  Gemma, ...: any model that builds its mask with transformers' masking
  utilities), for the Qwen2-VL family (multimodal RoPE positions computed
  per document with the model's own ``get_rope_index``) and for
  vision-language models of other layouts (Gemma 3, PaliGemma, Idefics3,
  SmolVLM, Mistral3, LLaVA, LLaVA-Next, InternVL, ...): ``use_cache=False``
  (transformers detects packing only without a cache), positions restarting
  per document, HF's varlen keys, images of different sizes or counts padded
  as the processors pad a batch, each document's own attention masks where
  transformers would build them wrongly for packed documents (Gemma 3 with
  ``token_type_ids``: a :class:`LayerMasks` in ``attention_mask``), and
  padding documents that make empty and image-less micro-batches runnable at
  zero loss. It probes the model once with batches shaped like training's
  and raises :class:`PackingError` if the model would mix packed documents.
- :func:`microbatch.torch.summed_loss` takes the model's output and the batch:
  ``summed_loss(model(**batch), batch, "token")``.

The training loop
-----------------

The trainer's contract (``microbatch.__doc__``) with a Hugging Face model,
under DDP: every micro-batch's *summed* loss times the step's loss scale,
gradients synchronized at the last micro-step only, every micro-step run on
every rank (the collator turns an empty micro-batch into a padding document
with zero loss, and gives an image-less micro-batch of a vision model a
zero-weighted padding image so the vision tower gets its gradient)::

    import contextlib
    import torch, torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data import DataLoader
    from microbatch.hf import PackedCollator, placeholder_ids
    from microbatch.torch import BalancedBatchSampler, sample_tokens, summed_loss

    dist.init_process_group("gloo")                   # or "nccl"; torchrun sets the rest
    model = transformers.Qwen2VLForConditionalGeneration.from_pretrained(...)
    collator = PackedCollator(model)                  # before DDP; probes the model once
    # dataset: samples as the processor makes them (input_ids, labels, pixel_values, image_grid_thw, ...)
    ids = placeholder_ids(model)                      # the config's image and video placeholder tokens
    # Each sample's text, image and loss tokens, read from input_ids and labels (any family whose
    # processor expands an image into placeholder tokens).
    sampler = BalancedBatchSampler(lambda i: sample_tokens(dataset[i], placeholders=ids),
                                   num_samples=len(dataset), global_batch_size=256,
                                   model="qwen2.5-vl-7b", seq_len=8192, seed=0, verify=True)
    loader = DataLoader(dataset, batch_sampler=sampler, collate_fn=collator, num_workers=2)
    model = DDP(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5)
    for epoch in range(epochs):
        sampler.set_epoch(epoch)
        batches = iter(loader)
        for step in sampler.steps():
            scale = step.loss_scale("token", "mean")
            for j in range(step.micro_steps):
                batch = next(batches)                 # never empty: padded by the collator
                last = j == step.micro_steps - 1
                with contextlib.nullcontext() if last else model.no_sync():
                    loss = summed_loss(model(**batch), batch, "token")
                    (loss * scale).backward()         # never divide by step.micro_steps
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)

Do not use ``model(**batch).loss``: it is transformers' mean over the
micro-batch's tokens (NaN for a padding-only micro-batch), not the summed
loss the plan's scale expects. ``transformers.Trainer`` users:
:class:`BalancedTrainer` (:mod:`microbatch.hf.trainer`, imported on first use)
runs this loop inside ``Trainer.train()``.

What the collator reads from the model, so that other families work too:
``get_rope_index`` (multimodal RoPE: then ``position_ids`` is ``(4, 1, T)``,
row 0 the text positions transformers builds the packed mask from),
``image_token_id``/``video_token_id``, and the vision config's
``spatial_merge_size``, ``patch_size``, ``temporal_patch_size`` and
``in_channels`` (the padding image); for a vision model of another layout,
the layout its ``get_image_features`` takes and the placeholder count of one
image of ``vision_config.image_size`` (or ``padding_sample=``); the
per-token keys its ``forward`` takes and those its
``create_masks_for_generate`` reads into the attention masks; the text
config's ``sliding_window`` and ``layer_types`` (the probe's documents
outgrow a small window, and every kind of layer runs); the first position
the model numbers a sequence from (PaliGemma: 1).

Example (one process; a tiny Qwen2 from a config, random weights):

>>> import torch, transformers
>>> from microbatch.hf import PackedCollator
>>> from microbatch.torch import summed_loss
>>> torch.manual_seed(0) is not None
True
>>> config = transformers.Qwen2Config(vocab_size=32, hidden_size=16, intermediate_size=32,
...     num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1)
>>> model = transformers.Qwen2ForCausalLM(config)
>>> collator = PackedCollator(model)
>>> batch = collator([{"input_ids": [1, 2, 3, 4]}, {"input_ids": [5, 6, 7]}])
>>> loss = summed_loss(model(**batch), batch, "token")   # 3 + 2 loss tokens, summed
>>> loss.backward()
>>> empty = collator([])                                   # an empty micro-batch
>>> zero = summed_loss(model(**empty), empty, "token")
>>> zero.item(), zero.requires_grad
(0.0, True)
"""

from __future__ import annotations

from typing import Any

from .collate import ITEM_KEYS, TOKEN_KEYS, LayerMasks, PackedCollator, PackingError

__all__ = [
    "PackedCollator", "PackingError", "LayerMasks", "TOKEN_KEYS", "ITEM_KEYS", "BalancedTrainer", "LOSS_SCALE_KEY",
    "placeholder_ids", "unused_parameters",
]


def __getattr__(name: str) -> Any:
    # The Trainer integration on first use only: importing transformers.Trainer costs seconds (and accelerate).
    if name in ("BalancedTrainer", "LOSS_SCALE_KEY", "placeholder_ids", "unused_parameters"):
        from . import trainer

        return getattr(trainer, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

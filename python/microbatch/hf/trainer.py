"""``transformers.Trainer`` on the balanced plan: :class:`BalancedTrainer`.

A drop-in subclass of ``transformers.Trainer`` whose training loop follows the
trainer's contract (``microbatch.__doc__``):

- the training ``DataLoader`` draws this rank's micro-batches from a
  :class:`microbatch.torch.BalancedBatchSampler` planned with exactly
  ``args.gradient_accumulation_steps`` micro-steps per optimizer step, so
  Trainer's accumulation groups are the plan's steps (the sampler is already
  rank-aware: accelerate's ``BatchSamplerShard``, which would shard the
  micro-batches across ranks a second time, is made a pass-through, as
  transformers does for its own ``BatchRebalanceSampler``);
- every micro-batch is packed by :class:`microbatch.hf.PackedCollator` (the
  default ``data_collator``), empty and image-less micro-batches included;
- the loss of a micro-batch is its *summed* loss
  (:func:`microbatch.torch.summed_loss` on the logits) times the step's loss
  scale, carried with the batch from the sampler; Trainer's own
  normalizations are off: no division by the accumulation steps
  (``loss_is_scaled_for_ga = True``), no ``num_items_in_batch`` (neither
  counted nor gathered across ranks), no model-computed mean loss (the labels
  are not passed to the model).

So the gradient of every optimizer step is the one of the unsplit global batch
(the mean over its loss tokens, or over its samples), whatever rank and
micro-step each sample lands on. Evaluation and prediction are Trainer's own.

Example (one process; a tiny Qwen2 from a config, random weights; the
metadata the planner needs is read from the dataset):

>>> import tempfile, torch, transformers
>>> from microbatch.hf.trainer import BalancedTrainer
>>> config = transformers.Qwen2Config(vocab_size=64, hidden_size=16, intermediate_size=32,
...     num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1)
>>> model = transformers.Qwen2ForCausalLM(config)
>>> g = torch.Generator().manual_seed(0)
>>> dataset = [{"input_ids": torch.randint(1, 64, (n,), generator=g)}
...            for n in torch.randint(8, 60, (32,), generator=g).tolist()]
>>> with tempfile.TemporaryDirectory() as out:
...     args = transformers.TrainingArguments(
...         output_dir=out, gradient_accumulation_steps=2, num_train_epochs=1, learning_rate=1e-3,
...         report_to="none", save_strategy="no", disable_tqdm=True, use_cpu=True)
...     trainer = BalancedTrainer(model=model, args=args, train_dataset=dataset,
...                               global_batch_size=16, seq_len=512, cost_model="qwen2.5-vl-7b")
...     result = trainer.train()  # doctest: +ELLIPSIS
{'train_runtime': ...}
>>> trainer.state.global_step, [s.micro_steps for s in trainer.balanced_sampler.steps()]
(2, [2, 2])

Under ``torchrun`` (DDP) the same script trains on every rank's balanced
micro-batches; ``python/examples/train_hf_vlm.py --trainer`` runs a tiny
Qwen2-VL that way.

**Unused parameters under DDP.** The collator pads empty and image-less
micro-batches (a padding document, a padding image), so every parameter
that a micro-batch with an image reaches gets a gradient on every rank, in
every micro-step. ``ddp_find_unused_parameters=False`` (which spares DDP its
search) is safe only when that is every trainable parameter: true of the
Qwen2-VL family and InternVL, not of LLaVA with a CLIP tower (its features
are read from ``vision_feature_layer=-2``: the last layer and
``post_layernorm`` never get a gradient, with or without images) nor of a
SigLIP tower with ``vision_use_head=True`` (its pooling head). With
``ddp_find_unused_parameters=False`` (or Trainer's default under activation
checkpointing, which then turns the search off, with several processes)
``BalancedTrainer`` checks this at construction with
:func:`unused_parameters` (one forward and backward of the padding
micro-batch) and raises :class:`microbatch.SettingError` naming the
parameters, instead of DDP's "Expected to have finished reduction" at the
first step: freeze them (``requires_grad_(False)``: the update is the same,
they never get a gradient) or leave ``ddp_find_unused_parameters`` at
``None``/``True``. Trainer's default without checkpointing lets DDP search.

Not supported: an ``IterableDataset`` (a step is planned from the whole
global batch, so the dataset needs ``__len__``); ``sync="step"`` assumes
Trainer's DDP (gradients synchronized at the last micro-step), pass
``"micro-step"`` or ``"phase"`` under FSDP or DeepSpeed ZeRO-3. Resuming
from a checkpoint goes through Trainer's own batch skipping, which keeps
each micro-batch's mark, but is not tested here.
"""

from __future__ import annotations

import dataclasses
import inspect
import operator
from typing import Any, Callable, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple, Union

import torch
import transformers

from .. import _native
from ..errors import InputError, SettingError
from ..torch import VISION_KEY_PREFIXES, BalancedBatchSampler, sample_tokens, summed_loss
from .collate import PackedCollator

__all__ = ["BalancedTrainer", "LOSS_SCALE_KEY", "placeholder_ids", "PLACEHOLDER_ATTRIBUTES"]

#: The batch key that carries a training micro-batch's loss scale and place in
#: the plan from the sampler to :meth:`BalancedTrainer.compute_loss` (removed
#: there: the model never sees it).
LOSS_SCALE_KEY = "microbatch_step"


@dataclasses.dataclass(frozen=True)
class _Mark:
    """A micro-batch's place in the epoch's plan and its loss scale."""

    step: int
    micro_step: int
    micro_steps: int
    scale: float


class _MarkedSampler:
    """The balanced sampler's micro-batches, each led by its :class:`_Mark` (a batch sampler for ``DataLoader``)."""

    def __init__(self, sampler: BalancedBatchSampler, normalization: str, reduction: str) -> None:
        self.sampler = sampler
        self.normalization = normalization
        self.reduction = reduction
        # accelerate's BatchSamplerShard reads these.
        self.drop_last = False
        self.batch_size = None

    def __len__(self) -> int:
        return len(self.sampler)

    def set_epoch(self, epoch: int) -> None:
        self.sampler.set_epoch(epoch)

    def __iter__(self) -> Iterator[List[Any]]:
        for step in self.sampler.steps():
            scale = step.loss_scale(self.normalization, self.reduction)
            for j in range(step.micro_steps):
                yield [_Mark(step.index, j, step.micro_steps, scale), *step.micro_batch(j)]


class _MarkedDataset(torch.utils.data.Dataset):
    """The training dataset, read a micro-batch at a time: the mark passes through to the collator."""

    def __init__(self, dataset: Any) -> None:
        self.dataset = dataset

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, index: int) -> Any:
        return self.dataset[index]

    def __getitems__(self, indices: Sequence[Any]) -> List[Any]:
        return [i if isinstance(i, _Mark) else self.dataset[i] for i in indices]


class _MarkedCollator:
    """Packs a micro-batch's samples with the user's collator and adds the mark under :data:`LOSS_SCALE_KEY`."""

    def __init__(self, collator: Callable[[List[Any]], Dict[str, Any]]) -> None:
        self.collator = collator

    def __call__(self, items: List[Any]) -> Dict[str, Any]:
        if not items or not isinstance(items[0], _Mark):
            raise InputError(
                "a training micro-batch reached BalancedTrainer's collator without its plan mark: "
                "the training DataLoader must be BalancedTrainer.get_train_dataloader's",
                item=LOSS_SCALE_KEY,
            )
        batch = dict(self.collator(list(items[1:])))
        batch[LOSS_SCALE_KEY] = items[0]
        return batch


#: The config attributes that name image and video placeholder token ids, read
#: on the config and on its text config by :func:`placeholder_ids`.
PLACEHOLDER_ATTRIBUTES: Tuple[str, ...] = ("image_token_id", "image_token_index", "video_token_id", "video_token_index")


def placeholder_ids(model_or_config: Any) -> Tuple[int, ...]:
    """The image and video placeholder token ids of a transformers model (or config), sorted.

    Read from the attributes :data:`PLACEHOLDER_ATTRIBUTES` of the config and
    of its text config (``get_text_config()``); an attribute that is absent,
    ``None`` or negative names nothing. Empty for a text model, and for a
    vision-language model whose config names no placeholder (then
    :func:`microbatch.torch.sample_tokens` refuses its samples with images
    rather than planning them as text).

    >>> import transformers
    >>> from microbatch.hf.trainer import placeholder_ids
    >>> placeholder_ids(transformers.LlavaConfig(image_token_index=32000))
    (32000,)
    >>> placeholder_ids(transformers.Qwen2VLConfig(image_token_id=151655, video_token_id=151656))
    (151655, 151656)
    >>> placeholder_ids(transformers.LlamaConfig())
    ()
    """
    config = getattr(model_or_config, "config", model_or_config)
    sources = [config]
    get_text = getattr(config, "get_text_config", None)
    if callable(get_text):
        try:
            text = get_text()
        except Exception:  # noqa: BLE001 - a config without a usable text config: the outer one only
            text = None
        if text is not None and text is not config:
            sources.append(text)
    found = set()
    for c in sources:
        for name in PLACEHOLDER_ATTRIBUTES:
            v = getattr(c, name, None)
            if isinstance(v, bool) or v is None:
                continue
            try:
                v = operator.index(v)
            except TypeError:
                continue
            if v >= 0:
                found.add(v)
    return tuple(sorted(found))


def unused_parameters(model: torch.nn.Module, batch: Optional[Mapping[str, Any]] = None) -> List[str]:
    """The names of ``model``'s trainable parameters that a training micro-batch leaves without a gradient.

    DDP without its search for unused parameters
    (``ddp_find_unused_parameters=False``, or Trainer's default under
    activation checkpointing) needs every trainable parameter to get a
    gradient in every backward, and stops otherwise ("Expected to have
    finished reduction in the prior iteration"). The collator's padding
    makes that hold for empty and image-less micro-batches, but some
    families have parameters that never take part in the forward, with or
    without images: a vision tower's layers after the one its features are
    read from (LLaVA's CLIP tower with ``vision_feature_layer=-2``: its last
    layer and ``post_layernorm``), a pooling head the model does not read
    (SigLIP with ``vision_use_head=True``). Freeze those
    (``requires_grad_(False)``: the update is unchanged, they never get a
    gradient) or let DDP search.

    Runs ``model`` once in training mode, forward and backward, on ``batch``
    (a packed micro-batch; ``None``: the padding micro-batch of
    ``PackedCollator(model)``, one padding document with a padding image
    for a vision-language model): the backward is taken with
    ``torch.autograd.grad``, so no ``.grad`` is written, and the random
    number generators are restored. Under FSDP or DeepSpeed ZeRO-3 the
    forward is a collective: call it on every rank, or not at all.

    >>> import transformers
    >>> from microbatch.hf.trainer import unused_parameters
    >>> config = transformers.LlavaConfig(
    ...     vision_config=dict(model_type="clip_vision_model", hidden_size=16, intermediate_size=32,
    ...                        num_hidden_layers=2, num_attention_heads=2, image_size=8, patch_size=2),
    ...     text_config=dict(model_type="llama", vocab_size=64, hidden_size=16, intermediate_size=32,
    ...                      num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1),
    ...     image_token_index=60, image_seq_length=16)
    >>> model = transformers.LlavaForConditionalGeneration(config)
    >>> unused = unused_parameters(model)   # vision_feature_layer=-2: the last CLIP layer, post_layernorm
    >>> [n for n in unused if "layers.1." not in n]
    ['model.vision_tower.post_layernorm.weight', 'model.vision_tower.post_layernorm.bias']
    >>> len(unused)   # and the 16 tensors of the last layer, model.vision_tower.encoder.layers.1
    18
    >>> for name in unused:
    ...     _ = model.get_parameter(name).requires_grad_(False)
    >>> unused_parameters(model)
    []
    """
    if batch is None:
        batch = PackedCollator(model)([])
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    if not named:
        return []
    device = named[0][1].device
    inputs = {k: (v.to(device) if isinstance(v, torch.Tensor) else v) for k, v in batch.items() if k != LOSS_SCALE_KEY}
    labels = inputs.pop("labels", None)
    was_training = model.training
    cuda = sorted({p.device.index or 0 for _, p in named if p.device.type == "cuda"})
    with torch.random.fork_rng(devices=cuda):
        model.train()
        try:
            out = model(**inputs)
            logits: Any = out.get("logits") if isinstance(out, Mapping) else getattr(out, "logits", out)
            if labels is not None:
                loss = summed_loss(logits, {**inputs, "labels": labels}, "token")
            else:
                loss = logits.sum() * 0.0
            grads = torch.autograd.grad(loss, [p for _, p in named], allow_unused=True)
        finally:
            model.train(was_training)
    return [n for (n, _), g in zip(named, grads) if g is None]


class BalancedTrainer(transformers.Trainer):
    """A ``transformers.Trainer`` that trains on the balanced plan and gives the unsplit step's gradient.

    Takes every argument of ``transformers.Trainer`` (keyword arguments
    only), plus the planner's:

    Args:
        text_tokens, image_tokens, loss_tokens: the training samples'
            metadata, as :class:`microbatch.torch.BalancedBatchSampler` takes
            it (``text_tokens`` may be a callable ``meta(index) -> (text,
            images[, loss])``). ``None``: read from ``train_dataset`` once
            per sample, when its step is first planned, by
            :func:`microbatch.torch.sample_tokens` with the model's
            :func:`placeholder_ids`: each run of the config's image or video
            placeholder tokens in ``input_ids`` is one image, the rest of
            ``input_ids`` is text, the loss tokens are those of ``labels``.
            This holds for every family whose processor expands an image
            into placeholder tokens (LLaVA, InternVL, Qwen2-VL, Gemma 3,
            ...); a sample with images (a key of the model's forward such
            as ``pixel_values``) whose tokens cannot be counted that way (no
            placeholder id in the config, or none in its ``input_ids``)
            raises :class:`microbatch.InputError` when its step is planned,
            never planned as text. Give them when reading a sample is costly
            (images decoded in ``__getitem__``) or the model is of another
            layout.
        seq_len: the packed sequence length (tokens of one micro-batch).
        cost_model: the planner's cost model (a preset name such as
            ``"qwen2.5-vl-7b"``, ``"costs"``, or a model of :mod:`microbatch.cost`).
        global_batch_size: the samples of one optimizer step over all ranks;
            ``None``: Trainer's total train batch size,
            ``per_device_train_batch_size * gradient_accumulation_steps * world_size``.
        normalization: ``"token"`` (the step's loss is the mean over its loss
            tokens) or ``"sample"`` (the mean over its samples of each sample's
            mean token loss).
        sync: the plan's sync model: ``"step"`` for DDP (Trainer's default:
            gradients synchronized at the last micro-step), ``"micro-step"`` or
            ``"phase"`` under FSDP or DeepSpeed ZeRO-3.
        sampler_settings: other keyword arguments of
            :class:`microbatch.torch.BalancedBatchSampler` (``image_units``,
            ``costs``, ``max_images``, ``refinement``, ...); its
            ``micro_steps`` is ``args.gradient_accumulation_steps``, its
            ``seed`` ``args.data_seed`` (or ``args.seed``), its ``drop_last``
            ``args.dataloader_drop_last``, its ranks Trainer's.

    ``data_collator`` defaults to ``PackedCollator(model)``. With
    ``args.remove_unused_columns`` (Trainer's default), sample keys that the
    model's ``forward`` does not take are dropped before packing, as Trainer
    does.

    The reported training loss is the step's loss (each micro-batch's scaled
    loss, summed over micro-steps and averaged over ranks).

    Raises:
        SettingError: a normalization or setting it cannot honour, a
            ``train_dataset`` without ``__len__``, or an epoch whose plan has
            another micro-step count than ``gradient_accumulation_steps``
            (at the first batch of each epoch). Planning errors (a sample
            longer than ``seq_len``, a batch that does not fit in
            ``gradient_accumulation_steps`` micro-steps) are the planner's,
            raised when the epoch is planned. At construction, when DDP runs
            without its search for unused parameters and the collator is a
            :class:`PackedCollator`: trainable parameters that a padding
            micro-batch leaves without a gradient (see "Unused parameters
            under DDP" in :mod:`microbatch.hf.trainer`).
        InputError: a training sample whose image tokens cannot be counted
            (see ``text_tokens``), when its step is planned.

    Example: see :mod:`microbatch.hf.trainer`.
    """

    loss_is_scaled_for_ga: Optional[bool] = True

    def __init__(
        self,
        *args: Any,
        text_tokens: Any = None,
        image_tokens: Any = None,
        loss_tokens: Any = None,
        seq_len: int,
        cost_model: Any = "qwen2.5-vl-7b",
        global_batch_size: Optional[int] = None,
        normalization: str = "token",
        sync: str = "step",
        sampler_settings: Optional[Mapping[str, Any]] = None,
        **kwargs: Any,
    ) -> None:
        if args:
            raise SettingError(
                "pass BalancedTrainer's arguments by keyword (model=..., args=..., train_dataset=...)", item="args"
            )
        normalization = _native.normalization(normalization)
        settings = dict(sampler_settings or {})
        taken = sorted(set(settings) & {"micro_steps", "num_replicas", "rank", "seed", "drop_last", "global_batch_size",
                                         "model", "seq_len", "sync", "planner", "loss_tokens", "image_tokens"})
        if taken:
            raise SettingError(
                f"sampler_settings {taken} are set by BalancedTrainer (from its own arguments and the "
                "TrainingArguments): pass them there",
                item=taken[0],
            )
        if kwargs.get("data_collator") is None:
            model = kwargs.get("model")
            if model is None:
                raise SettingError(
                    "BalancedTrainer needs model= to build its PackedCollator (or pass data_collator=)", item="model"
                )
            kwargs["data_collator"] = PackedCollator(model)
        super().__init__(**kwargs)
        self.normalization = normalization
        self._balance: Dict[str, Any] = dict(
            text_tokens=text_tokens, image_tokens=image_tokens, loss_tokens=loss_tokens, seq_len=seq_len,
            model=cost_model, global_batch_size=global_batch_size, sync=sync, **settings,
        )
        self.balanced_sampler: Optional[BalancedBatchSampler] = None
        if self._ddp_without_search():
            self._check_every_parameter_trains()

    # --- DDP without the search for unused parameters ---------------------------

    def _ddp_without_search(self) -> bool:
        """Whether DDP will run (or was asked to run) without its search for unused parameters:
        ``ddp_find_unused_parameters=False``, or Trainer's default (``None``) under activation
        checkpointing with more than one process; never under FSDP or DeepSpeed."""
        args = self.args
        if getattr(self, "is_fsdp_enabled", False) or getattr(self, "is_deepspeed_enabled", False):
            return False
        if args.ddp_find_unused_parameters is not None:
            return args.ddp_find_unused_parameters is False
        checkpointing = bool(
            getattr(self.model, "is_activation_checkpointing", False)
            or getattr(self.model, "is_gradient_checkpointing", False)
            or getattr(args, "activation_checkpointing", False)
            or getattr(args, "gradient_checkpointing", False)
        )
        return checkpointing and int(args.world_size) > 1

    def _check_every_parameter_trains(self) -> None:
        """:func:`unused_parameters` on the collator's padding micro-batch; a :class:`SettingError` naming
        the parameters DDP would stop on (only with a :class:`PackedCollator`: another collator's
        batches are its own)."""
        collator = self.data_collator
        model = self.model
        if not isinstance(collator, PackedCollator) or model is None:
            return
        try:
            batch = collator([])
        except SettingError as e:
            raise SettingError(
                f"DDP runs without its search for unused parameters (ddp_find_unused_parameters=False, or "
                f"activation checkpointing), and BalancedTrainer checks on a padding micro-batch that every "
                f"trainable parameter gets a gradient, but the collator cannot build one: {e}",
                item="ddp_find_unused_parameters",
            ) from e
        unused = unused_parameters(model, batch)
        if unused:
            shown = ", ".join(unused[:8]) + (f", ... ({len(unused)} in all)" if len(unused) > 8 else "")
            raise SettingError(
                f"DDP runs without its search for unused parameters (ddp_find_unused_parameters=False, or "
                f"activation checkpointing), but {len(unused)} trainable parameters of "
                f"{type(model).__name__} get no gradient from a training micro-batch (probed with the "
                f"collator's padding micro-batch{', with an image' if collator.vision else ''}): {shown}. DDP "
                "would stop at the first backward ('Expected to have finished reduction'). They never take "
                "part in the forward (a vision tower's layers after its vision_feature_layer, its final norm, "
                "a pooling head the model does not read): freeze them before building the trainer (for name "
                "in microbatch.hf.trainer.unused_parameters(model): model.get_parameter(name)."
                "requires_grad_(False); the update is unchanged, they never get a gradient), or let DDP "
                "search (ddp_find_unused_parameters=True)",
                item=unused[0],
            )

    # --- the training data -----------------------------------------------------

    def _metadata(self, dataset: Any) -> Callable[[int], Tuple[int, List[int], int]]:
        placeholders = placeholder_ids(self.model)
        # The sample keys that reach the model: with remove_unused_columns, Trainer's signature
        # columns (the forward's named parameters, a PEFT model's base model's); the image keys
        # among them mark a sample with images. Otherwise every key with an image prefix.
        image_keys: Optional[List[str]] = None
        if self.args.remove_unused_columns:
            columns: Any = None
            try:
                self._set_signature_columns_if_needed()
                columns = self._signature_columns
            except (AttributeError, TypeError, ValueError):
                try:
                    columns = list(inspect.signature(self.model.forward).parameters)  # type: ignore[union-attr]
                except (TypeError, ValueError):
                    columns = None
            if columns is not None:
                image_keys = [k for k in columns if isinstance(k, str) and k.startswith(VISION_KEY_PREFIXES)]

        def meta(i: int) -> Tuple[int, List[int], int]:
            s = dataset[i]
            if not isinstance(s, Mapping) or "input_ids" not in s:
                raise InputError(
                    f"train_dataset[{i}] is not a dict with 'input_ids': give BalancedTrainer text_tokens= "
                    "(and image_tokens=, loss_tokens=)",
                    item=i,
                )
            return sample_tokens(s, placeholders=placeholders, image_keys=image_keys, index=i)

        return meta

    def balanced_batch_sampler(self) -> BalancedBatchSampler:
        """The sampler the training ``DataLoader`` draws from (built on first use, for Trainer's ranks)."""
        if self.balanced_sampler is not None:
            return self.balanced_sampler
        dataset = self.train_dataset
        if dataset is None:
            raise SettingError("BalancedTrainer needs a train_dataset to train", item="train_dataset")
        try:
            n = len(dataset)  # type: ignore[arg-type]
        except TypeError:
            raise SettingError(
                "BalancedTrainer plans whole optimizer steps and needs a train_dataset with __len__ "
                "(an IterableDataset cannot be planned)",
                item="train_dataset",
            ) from None
        args = self.args
        b = dict(self._balance)
        accumulation = int(args.gradient_accumulation_steps)
        world = max(1, int(args.world_size))
        if b["global_batch_size"] is None:
            b["global_batch_size"] = int(args.per_device_train_batch_size) * accumulation * world
        text = b.pop("text_tokens")
        kw: Dict[str, Any] = {}
        if text is None:
            if b["image_tokens"] is not None or b["loss_tokens"] is not None:
                raise SettingError(
                    "image_tokens= or loss_tokens= without text_tokens=: give all three, or none "
                    "(then they are read from the train_dataset)",
                    item="text_tokens",
                )
            del b["image_tokens"], b["loss_tokens"]
            text = self._metadata(dataset)
            kw["num_samples"] = n
        elif callable(text):
            del b["image_tokens"], b["loss_tokens"]
            kw["num_samples"] = n
        seed = args.data_seed if args.data_seed is not None else args.seed
        self.balanced_sampler = BalancedBatchSampler(
            text, **b, **kw, micro_steps=accumulation, num_replicas=world,
            rank=int(args.process_index) if world > 1 else 0, seed=seed,
            drop_last=bool(args.dataloader_drop_last),
        )
        return self.balanced_sampler

    def get_train_dataloader(self) -> torch.utils.data.DataLoader:
        """The training loader: this rank's balanced micro-batches, packed, each with its loss scale."""
        sampler = self.balanced_batch_sampler()
        marked = _MarkedSampler(sampler, self.normalization, "mean")
        collator: Callable[..., Any] = self.data_collator  # type: ignore[assignment]
        if self.args.remove_unused_columns:
            collator = self._get_collator_with_removed_columns(collator, description="training")
        args = self.args
        params: Dict[str, Any] = dict(
            batch_sampler=marked,
            collate_fn=_MarkedCollator(collator),
            num_workers=args.dataloader_num_workers,
            pin_memory=args.dataloader_pin_memory,
            persistent_workers=args.dataloader_persistent_workers and args.dataloader_num_workers > 0,
        )
        if args.dataloader_num_workers > 0 and args.dataloader_prefetch_factor is not None:
            params["prefetch_factor"] = args.dataloader_prefetch_factor
        loader = self.accelerator.prepare(torch.utils.data.DataLoader(_MarkedDataset(self.train_dataset), **params))
        # The sampler is already rank-aware: accelerate's BatchSamplerShard would hand every
        # rank only every world-th of its micro-batches (and cycle some again to even them out).
        shard = getattr(loader, "batch_sampler", None)
        if shard is not None and shard is not marked:
            if getattr(shard, "batch_sampler", None) is not marked:
                raise SettingError(
                    f"accelerate wrapped the training batch sampler in {type(shard).__name__}, which "
                    "BalancedTrainer cannot turn into a pass-through: its micro-batches would be re-split "
                    "across ranks",
                    item="train_dataloader",
                )
            shard.num_processes = 1
            shard.process_index = 0
        if len(loader) != len(sampler):
            raise SettingError(
                f"the training loader yields {len(loader)} micro-batches where the plan has {len(sampler)}",
                item="train_dataloader",
            )
        return loader

    # --- the loss -----------------------------------------------------------------

    def get_batch_samples(
        self, epoch_iterator: Iterator[Any], num_batches: int, device: torch.device
    ) -> Tuple[List[Any], Optional[Union[torch.Tensor, int]]]:
        """One optimizer step's micro-batches; ``num_items_in_batch`` is ``None`` (the plan's scale replaces it).

        Checks that the group Trainer takes is one whole step of the plan (its
        micro-steps ``0 .. A - 1``), so that no step's scale is applied to
        another step's micro-batches.
        """
        batches: List[Any] = []
        for _ in range(num_batches):
            try:
                batches.append(next(epoch_iterator))
            except StopIteration:
                break
        marks = [b.get(LOSS_SCALE_KEY) if isinstance(b, Mapping) else None for b in batches]
        if batches and all(isinstance(m, _Mark) for m in marks):
            first: _Mark = marks[0]  # type: ignore[assignment]
            if (
                len({m.step for m in marks}) != 1  # type: ignore[union-attr]
                or [m.micro_step for m in marks] != list(range(first.micro_steps))  # type: ignore[union-attr]
            ):
                seen = [(m.step, m.micro_step) for m in marks]  # type: ignore[union-attr]
                raise SettingError(
                    f"Trainer grouped the micro-batches (step, micro-step) {seen} into one optimizer step, "
                    f"where the plan's step {first.step} is its micro-steps 0 to {first.micro_steps - 1}: "
                    "the loader skipped or re-split micro-batches (a sampler sharded again across ranks), or "
                    "gradient_accumulation_steps differs from the plan's micro-steps; train with "
                    "BalancedTrainer.get_train_dataloader's loader",
                    item="gradient_accumulation_steps",
                )
        return batches, None

    def compute_loss(
        self,
        model: torch.nn.Module,
        inputs: Dict[str, Any],
        return_outputs: bool = False,
        num_items_in_batch: Optional[Union[torch.Tensor, int]] = None,
    ) -> Any:
        """A training micro-batch's summed loss times its step's loss scale; other batches as Trainer does.

        The labels are not passed to the model (its own loss would be the
        micro-batch's mean); :func:`microbatch.torch.summed_loss` computes the
        summed loss from the logits and the batch's sample boundaries.
        """
        mark = inputs.pop(LOSS_SCALE_KEY, None)
        if not isinstance(mark, _Mark):
            return super().compute_loss(model, inputs, return_outputs=return_outputs, num_items_in_batch=num_items_in_batch)
        labels = inputs.pop("labels")
        outputs = model(**inputs)
        loss = summed_loss(outputs, {**inputs, "labels": labels}, self.normalization) * mark.scale
        return (loss, outputs) if return_outputs else loss

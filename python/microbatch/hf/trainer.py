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
Qwen2-VL that way. Every parameter gets a gradient on every rank (the
collator pads empty and image-less micro-batches), so
``ddp_find_unused_parameters=False`` is safe and spares DDP its search.

Not supported: an ``IterableDataset`` (a step is planned from the whole
global batch, so the dataset needs ``__len__``); ``sync="step"`` assumes
Trainer's DDP (gradients synchronized at the last micro-step), pass
``"micro-step"`` or ``"phase"`` under FSDP or DeepSpeed ZeRO-3. Resuming
from a checkpoint goes through Trainer's own batch skipping, which keeps
each micro-batch's mark, but is not tested here.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple, Union

import torch
import transformers

from ..cost import _either
from ..errors import InputError, SettingError
from ..plan import NORMALIZATIONS
from ..torch import BalancedBatchSampler, loss_tokens, summed_loss
from .collate import PackedCollator

__all__ = ["BalancedTrainer", "LOSS_SCALE_KEY"]

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


def _image_tokens(sample: Mapping[str, Any], merge: Optional[int]) -> List[int]:
    grid = sample.get("image_grid_thw")
    if grid is None or merge is None:
        return []
    g = torch.as_tensor(grid).reshape(-1, 3)
    return [int(v) // (merge * merge) for v in g.prod(-1).tolist()]


class BalancedTrainer(transformers.Trainer):
    """A ``transformers.Trainer`` that trains on the balanced plan and gives the unsplit step's gradient.

    Takes every argument of ``transformers.Trainer`` (keyword arguments
    only), plus the planner's:

    Args:
        text_tokens, image_tokens, loss_tokens: the training samples'
            metadata, as :class:`microbatch.torch.BalancedBatchSampler` takes
            it (``text_tokens`` may be a callable ``meta(index) -> (text,
            images[, loss])``). ``None``: read from ``train_dataset`` once, on
            the first epoch: ``len(input_ids)`` minus the image tokens, the
            image tokens from ``image_grid_thw`` and the vision config's
            ``spatial_merge_size`` (the Qwen2-VL family), the loss tokens
            from ``labels`` (:func:`microbatch.torch.loss_tokens`). Give them
            when reading a sample is costly (images decoded in
            ``__getitem__``) or the model is of another layout.
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
            raised when the epoch is planned.

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
        if normalization not in NORMALIZATIONS:
            raise SettingError(f"unknown normalization {normalization!r}: use {_either(NORMALIZATIONS)}", item="normalization")
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

    # --- the training data -----------------------------------------------------

    def _metadata(self, dataset: Any) -> Callable[[int], Tuple[int, List[int], int]]:
        config = getattr(self.model, "config", None)
        vision = getattr(config, "vision_config", None)
        merge = getattr(vision, "spatial_merge_size", None)
        merge = int(merge) if merge is not None else None

        def meta(i: int) -> Tuple[int, List[int], int]:
            s = dataset[i]
            if not isinstance(s, Mapping) or "input_ids" not in s:
                raise InputError(
                    f"train_dataset[{i}] is not a dict with 'input_ids': give BalancedTrainer text_tokens= "
                    "(and image_tokens=, loss_tokens=)",
                    item=i,
                )
            images = _image_tokens(s, merge)
            labels = s.get("labels")
            ids = torch.as_tensor(s["input_ids"]).reshape(-1)
            text = int(ids.shape[0]) - sum(images)
            if text < 0:
                raise InputError(
                    f"train_dataset[{i}] has {ids.shape[0]} input_ids but {sum(images)} image tokens by its "
                    "image_grid_thw: give BalancedTrainer text_tokens= and image_tokens=",
                    item=i,
                )
            return text, images, loss_tokens(ids if labels is None else torch.as_tensor(labels).reshape(-1))

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

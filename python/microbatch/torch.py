"""PyTorch integration: a balanced batch sampler, a packed-sequence collate and the summed loss.

``microbatch.torch`` needs PyTorch (``pip install "microbatch[torch]"``);
``import microbatch`` alone does not import it.

- :class:`BalancedBatchSampler` replaces ``DistributedSampler`` +
  ``BatchSampler``: it shuffles the dataset per epoch, cuts it into global
  batches (optimizer steps), plans each step with :class:`microbatch.Planner`
  on every rank (the plan is a pure function of the step, so no communication
  is needed) and yields this rank's micro-batches as lists of dataset indices,
  so ``DataLoader(dataset, batch_sampler=sampler, num_workers=N)`` just works.
  :meth:`BalancedBatchSampler.steps` gives the training loop each step's
  micro-step count and loss scale.
- :func:`collate_packed` concatenates a micro-batch's samples into one packed
  row (the layout of Hugging Face's ``DataCollatorWithFlattening``):
  ``position_ids`` restarting at every sample, ``cu_seqlens`` for varlen
  attention kernels, labels masked at sample boundaries. It is for models
  you write yourself: for a Hugging Face ``transformers`` model use
  :class:`microbatch.hf.PackedCollator`, whose batch ``model(**batch)`` keeps
  the documents apart (``model(**collate_packed(...))`` does not: the
  model's cache is on by default, and transformers then ignores the packing).
- :func:`summed_loss` is the micro-batch's *summed* loss under either
  normalization, from the logits or the model's output; :func:`loss_tokens`
  counts what the planner's ``loss_tokens`` must hold for one sample.
- :class:`PlanMismatchError` is raised when ranks planned different steps
  (:meth:`BalancedBatchSampler.verify`).

A complete DDP training loop
----------------------------

The trainer's contract (``microbatch.__doc__``) in code: each micro-batch's
*summed* loss times the step's scale, gradients synchronized only at the last
micro-step (``no_sync`` before), never divided by the accumulation steps, and
every micro-step run on every rank, an empty micro-batch included (its loss is
a zero still connected to the parameters, so DDP's all-reduce stays in step)::

    import contextlib
    import torch, torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data import DataLoader
    from microbatch.torch import BalancedBatchSampler, collate_packed, loss_tokens, summed_loss

    dist.init_process_group("gloo")                # or "nccl"; torchrun sets the rest
    # Per-sample metadata, one entry per dataset index (or a callable, see the class).
    text = [len(s["input_ids"]) for s in dataset]   # tokens of the model input
    images = [s["image_tokens"] for s in dataset]   # each sample's images' token counts
    loss = [loss_tokens(s["labels"]) for s in dataset]
    sampler = BalancedBatchSampler(text, images, loss_tokens=loss, global_batch_size=256,
                                   model="qwen2.5-vl-7b", seq_len=8192, sync="step",
                                   seed=0, verify=True)
    loader = DataLoader(dataset, batch_sampler=sampler, collate_fn=collate_packed,
                        num_workers=2)
    model = DDP(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5)
    for epoch in range(epochs):
        sampler.set_epoch(epoch)
        batches = iter(loader)
        for step in sampler.steps():              # one optimizer step each
            scale = step.loss_scale("token", "mean")   # DDP averages over ranks
            for j in range(step.micro_steps):
                batch = next(batches)             # may be empty: run it anyway
                last = j == step.micro_steps - 1
                with contextlib.nullcontext() if last else model.no_sync():
                    logits = model(batch["input_ids"], position_ids=batch["position_ids"])
                    loss = summed_loss(logits, batch["labels"], batch["cu_seqlens"], "token")
                    (loss * scale).backward()     # never divide by step.micro_steps
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)

With ``normalization="sample"`` use ``step.loss_scale("sample", "mean")`` and
``summed_loss(..., "sample")`` (the sum over the micro-batch's samples of each
sample's mean token loss). A model that cannot run on an empty input
(``T = 0``) may instead be fed one padding token with its loss multiplied by
0: what matters is that every rank runs the same forward and backward count.
With FSDP or ZeRO-3 (``sync="micro-step"`` or ``"phase"``) there is no
``no_sync``: every micro-step's backward synchronizes, and the scale is the same.
Hugging Face ``Trainer`` and DeepSpeed divide the loss by the accumulation
steps by default; ``microbatch.__doc__`` says how to turn that off.

``python/examples/train_ddp.py`` runs this loop on a tiny model with 2
processes on the CPU; :mod:`microbatch.hf` shows it for Hugging Face models.

Example (one process, no process group: rank 0 of 1):

>>> import numpy as np
>>> from microbatch.torch import BalancedBatchSampler
>>> text = 20 + (np.arange(40) * 37) % 200
>>> sampler = BalancedBatchSampler(text, global_batch_size=16, model="qwen2.5-vl-7b",
...                                seq_len=512, num_replicas=2, rank=0, seed=1)
>>> [step.micro_steps for step in sampler.steps()] == [s.micro_steps for s in sampler.steps()]
True
>>> len(sampler) == sum(step.micro_steps for step in sampler.steps()) == len(list(sampler))
True
"""

from __future__ import annotations

import dataclasses
import difflib
import inspect
import operator
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Callable, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple, Union, overload

import numpy as np
import torch
import torch.nn.functional as F

from . import _arrays, _native
from ._step import PlanView, failure_text, group_device, raise_failed, status_round, wait_collective
from ._torch_common import (
    IGNORE_INDEX,
    PLANNER_SETTINGS,
    PlanMismatchError,
    as_tensor,
    loss_token_count,
    packed_layout,
    planner_for,
    tokens,
)
from .cost import _costs
from .errors import DtypeError, Error, InputError, InternalError, InvalidValueError, SettingError
from .plan import Plan, Planner, _cost_values

# The streaming path for per-rank loaders (every step: gather the metadata, plan with origins, execute
# the exchange) and the per-phase timings of a real model (the vision tower and the language model of
# each micro-batch, forward and backward) live in their own files; their public names are this module's.
# Neither imports this module (the package's imports form no cycle: tests/test_imports.py).
from ._stream import *  # noqa: F401,F403
from ._stream import __all__ as _stream_all
from ._timing import *  # noqa: F401,F403
from ._timing import __all__ as _timing_all

__all__ = [
    "BalancedBatchSampler",
    "Step",
    "Steps",
    "PlanMismatchError",
    "collate_packed",
    "loss_tokens",
    "sample_tokens",
    "VISION_KEY_PREFIXES",
    "summed_loss",
    "verify_plans",
    *_stream_all,
    *_timing_all,
]


def verify_plans(fingerprints: Sequence[int], *, group: Any = None) -> None:
    """Checks that every rank of ``group`` holds the same plan fingerprints.

    All-gathers ``fingerprints`` (one per step, in order: the values of
    :attr:`microbatch.Plan.fingerprint`, compared as 64-bit words) through
    ``torch.distributed`` in fixed-size ``int64`` tensors (on the process
    group's device: this rank's CUDA device under NCCL) and raises
    :class:`PlanMismatchError` on every rank when any rank's list differs
    from rank 0's, naming the ranks that differ and the first step where they
    do. Does nothing when ``torch.distributed`` is not initialized. A
    collective (one ``all_gather``, two when a rank gives more than one
    fingerprint): every rank of ``group`` must call it. When the collective
    itself fails (a rank's process ended, a rank never called it), the ranks
    that see it raise :class:`PlanMismatchError` of kind ``"Communication"``
    or ``"Timeout"`` (after the process group's timeout) saying what happened.

    >>> verify_plans([0x1234, 0x5678])  # no process group: nothing to compare
    """
    _verify_fingerprints(fingerprints, group=group, first=0)


def _verify_fingerprints(
    fingerprints: Sequence[int],
    *,
    group: Any,
    first: int,
    steps: Optional[int] = None,
    error: Optional[BaseException] = None,
    failed_step: Optional[int] = None,
) -> None:
    """:func:`verify_plans` for the steps ``first, first + 1, ...`` (named so in the error); with ``steps``,
    the ranks' numbers of steps in the epoch are compared first. ``error``: this rank failed planning step
    ``failed_step`` (its fingerprints are those before); every rank then raises (see ``verify=``), through
    the status round the stream uses (:func:`microbatch._step.status_round`)."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        if error is not None:
            raise error
        return
    world = dist.get_world_size(group)
    rank = dist.get_rank(group)
    device = group_device(group)

    def fail(kind: str, text: str, waited: float) -> PlanMismatchError:
        return PlanMismatchError(
            f"{text}; the plans could not be compared and the process group cannot be used any more",
            ranks=[rank],
            kind=kind,
        )

    def gather(t: torch.Tensor, what: str = "plan check") -> List[torch.Tensor]:
        """Every rank's copy of ``t``; a timeout or a closed connection is a PlanMismatchError saying which."""
        t = t.to(device)
        out = [torch.empty_like(t) for _ in range(world)]
        wait_collective(
            lambda: dist.all_gather(out, t, group=group, async_op=True), timeout=None, fail=fail, rank=rank, what=what
        )
        return [o.cpu() for o in out]

    mine = np.array([int(f) & (2**64 - 1) for f in fingerprints], dtype=np.uint64).view(np.int64)
    words = [-1 if steps is None else steps, mine.shape[0], int(mine[0]) if mine.shape[0] == 1 else 0]
    message = "" if error is None else failure_text(error, f"planning step {failed_step} failed: ")
    rows, failed, texts = status_round(gather, words, error, message)

    def failure(text: str, ranks: List[int]) -> PlanMismatchError:
        return PlanMismatchError(
            f"the ranks did not all plan the same steps: rank {ranks[0]} reports {text} (ranks {ranks} of "
            f"{world} failed): every rank must build its sampler from the same metadata, global batch size, "
            "seed, epoch and planner settings",
            ranks=ranks,
            kind="PlanFailed",
        )

    # Every rank failed alike (the same step refused by the same planner): that error, the same everywhere.
    raise_failed(failed, texts, error, failure, own_if_all=True)
    lengths = rows[:, 1]
    if int(lengths.max()) <= 1:
        lists = [rows[r, 2 : 2 + int(lengths[r])] for r in range(world)]
    else:  # a second round, every rank's list padded to the longest
        padded = np.zeros(int(lengths.max()), dtype=np.int64)
        padded[: mine.shape[0]] = mine
        everyone = torch.stack(gather(torch.from_numpy(padded), "plan check's fingerprint round")).numpy()
        lists = [everyone[r, : int(lengths[r])] for r in range(world)]
    gathered = [(int(rows[r, 0]), lists[r].view(np.uint64).tolist()) for r in range(world)]
    reference = gathered[0]
    differ = [r for r in range(world) if gathered[r] != reference]
    if not differ:
        return
    r = differ[0]
    (count, other), (count0, ref) = gathered[r], reference
    if count != count0:
        where = f"rank {r} has {count} steps in the epoch where rank 0 has {count0}"
    elif len(other) != len(ref):
        where = f"rank {r} planned {len(other)} steps where rank 0 planned {len(ref)}"
    else:
        s = next(i for i, (a, b) in enumerate(zip(ref, other)) if a != b)
        where = f"at step {first + s}, rank {r} has fingerprint {other[s]:#018x} where rank 0 has {ref[s]:#018x}"
    raise PlanMismatchError(
        f"the plans differ between ranks (ranks {differ} differ from rank 0; {where}): every rank must "
        "build its sampler from the same metadata, global batch size, seed, epoch and planner settings",
        ranks=differ,
    )


@dataclasses.dataclass(frozen=True)
class Step(PlanView):
    """One optimizer step of an epoch, as seen from one rank.

    The sampler yields the step's :attr:`micro_steps` micro-batches in order;
    the training loop runs forward and backward on each (an empty one too),
    multiplies each micro-batch's summed loss by :meth:`loss_scale`, and steps
    the optimizer after the last.

    Attributes:
        index: the step's position in the epoch (0, 1, ...).
        epoch: the epoch the step belongs to.
        rank: the rank this record is for.
        plan: the step's whole plan (every rank's micro-batches).

    >>> import microbatch
    >>> from microbatch.torch import Step
    >>> plan = microbatch.Planner("qwen2.5-vl-7b", ranks=2, seq_len=512).plan(
    ...     ids=[0, 1, 2, 3], text_tokens=[100, 200, 300, 50], loss_tokens=[10, 20, 30, 0])
    >>> step = Step(index=0, epoch=0, rank=1, plan=plan)
    >>> step.loss_scale("token", "mean") == 2 / 60 and step.loss_scale("sample", "sum") == 1 / 4
    True
    >>> sorted(i for r in (0, 1) for j in range(step.micro_steps)
    ...        for i in Step(0, 0, r, plan).micro_batch(j))
    [0, 1, 2, 3]
    """

    index: int
    epoch: int
    rank: int
    plan: Plan


Metadata = Callable[[int], Tuple[Any, ...]]

#: The planned steps a sampler keeps (per sampler, the most recent ones): the
#: loader's iteration and the training loop's :meth:`BalancedBatchSampler.steps`
#: share them, so each step is planned once while the loader runs at most this
#: many steps ahead of the loop (``num_workers * prefetch_factor`` micro-batches).
KEEP_STEPS = 8

#: The default ``bytes=`` estimate of :class:`BalancedBatchSampler`: bytes per
#: text token (its ``input_ids`` and ``labels`` entries, two ``int64``).
TEXT_TOKEN_BYTES = 16
#: ... and bytes per image token (the ``uint8`` RGB pixels of the 28 x 28
#: patch behind one Qwen2-VL token: the planner's own default).
IMAGE_TOKEN_BYTES = 2352

# The keyword arguments of microbatch.Planner that the sampler passes on.
_PLANNER_SETTINGS = PLANNER_SETTINGS


class Steps(Sequence[Step]):
    """One epoch's steps for one rank, planned on demand: what :meth:`BalancedBatchSampler.steps` returns.

    A read-only sequence. ``len(steps)`` is the number of steps (no planning);
    iterating plans one step at a time, sharing each plan with the sampler's
    own iteration (the loader's), so the documented training loop plans every
    step once and holds O(one step) of plans; with ``verify=True`` each step's
    fingerprint is checked across ranks before it is yielded (a collective:
    every rank must iterate; at step 0 the ranks' step counts are compared
    too, so a rank with another epoch length raises instead of hanging). ``steps[k]`` plans step ``k`` if it is not among
    the :data:`KEEP_STEPS` kept (O(one step)); ``list(steps)`` holds every
    plan of the epoch: O(epoch) memory, as ``steps()`` returned before.

    >>> import numpy as np
    >>> from microbatch.torch import BalancedBatchSampler
    >>> text = 20 + (np.arange(40) * 37) % 200
    >>> steps = BalancedBatchSampler(text, global_batch_size=16, model="qwen2.5-vl-7b", seq_len=512,
    ...                              num_replicas=2, rank=0).steps()
    >>> len(steps), steps[-1].index, steps[2].samples, [s.index for s in steps]
    (3, 2, 8, [0, 1, 2])
    """

    __slots__ = ("_sampler", "epoch")

    def __init__(self, sampler: "BalancedBatchSampler", epoch: int) -> None:
        self._sampler = sampler
        self.epoch = epoch

    def __len__(self) -> int:
        return self._sampler._count()

    @overload
    def __getitem__(self, k: int) -> Step: ...

    @overload
    def __getitem__(self, k: slice) -> List[Step]: ...

    def __getitem__(self, k: Union[int, slice]) -> Union[Step, List[Step]]:
        n = len(self)
        if isinstance(k, slice):
            return [self._sampler._step(self.epoch, i) for i in range(*k.indices(n))]
        i = operator.index(k)
        if not -n <= i < n:
            raise IndexError(f"step {k} is out of range: the epoch has {n} steps")
        return self._sampler._step(self.epoch, i % n)

    def __iter__(self) -> Iterator[Step]:
        s = self._sampler
        count = len(self)
        for k in range(count):
            if not (s.verify_plans and s._verified_epoch != self.epoch):
                yield s._step(self.epoch, k, ahead=True)
                continue
            # At step 0 the step counts too: every rank then runs as many of these collectives. A rank
            # that fails planning the step still takes part (with its error), so no rank waits for it.
            total = count if k == 0 else None
            try:
                step = s._step(self.epoch, k, ahead=True)
            except Exception as e:
                _verify_fingerprints([], group=None, first=k, steps=total, error=e, failed_step=k)
                raise  # unreachable: every rank raised above
            _verify_fingerprints([step.fingerprint], group=None, first=k, steps=total)
            yield step

    def __eq__(self, other: object) -> bool:
        """Equal to a sequence of as many steps with the same index, epoch, rank and plan fingerprint
        (a step planned again is equal although its report's ``planning_time`` differs)."""
        if not isinstance(other, (Steps, list, tuple)):
            return NotImplemented

        def key(st: Any) -> Any:
            return (st.index, st.epoch, st.rank, st.fingerprint) if isinstance(st, Step) else st

        return len(self) == len(other) and all(key(a) == key(b) for a, b in zip(self, other))

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Steps(epoch={self.epoch}, steps={len(self)}, rank={self._sampler.rank})"


class BalancedBatchSampler(torch.utils.data.Sampler):
    """A batch sampler that yields this rank's balanced micro-batches: the drop-in for ``DistributedSampler`` + ``BatchSampler``.

    Args:
        text_tokens: each dataset index's text tokens (1-D integers), or a
            callable ``meta(index) -> (text_tokens, image_tokens[, loss_tokens])``
            (``image_tokens`` a list of per-image token counts, possibly
            empty), called lazily: for the indices of a step when that step
            is planned, once per index (the rows read are kept: O(indices
            read) memory), so the first step reads one global batch's
            metadata, not the dataset's; it then needs ``num_samples`` and
            replaces ``image_tokens`` and ``loss_tokens``. Every row must have
            the same length (2 or 3). An error names the index and is raised
            when its step is planned; the row stays unread, so planning the
            step again calls the callable again. With ``plan_ahead`` it may be
            called from the planning thread (never from two threads at once).
            For samples as a transformers processor makes them, of any
            vision-language family, ``lambda i: sample_tokens(dataset[i],
            placeholders=ids)`` is such a callable (:func:`sample_tokens`;
            ``ids = microbatch.hf.trainer.placeholder_ids(model)``): each
            sample is planned with its image tokens, or refused.
        image_tokens: each index's images as token counts (a list of 1-D
            arrays, or ``(values, offsets)``: see :meth:`microbatch.Planner.plan`);
            ``None``: no images.
        global_batch_size: the samples of one optimizer step over all ranks
            (at least ``num_replicas``).
        loss_tokens: each index's loss tokens (see :func:`loss_tokens`);
            ``None``: all its text tokens.
        image_units: each image's vision units (tiles), shaped like ``image_tokens``.
        costs: per-sample costs for a planner whose cost model takes them
            (passed on, gathered per step, as ``costs=`` to ``Planner.plan``):
            an ``(n, 2)`` array or a dict of 1-D arrays.
        origins: the rank that holds each sample, for the plan's
            :attr:`microbatch.Plan.exchange` and for ``locality``:
            ``"distributed"``, the rank a ``DistributedSampler`` with the same
            ``num_replicas``, ``shuffle``, ``seed`` and epoch would have given
            the sample (position ``p`` of the epoch's order goes to rank
            ``p % num_replicas``, as ``DistributedSampler`` deals it); an array
            with one rank per dataset index (``-1``: held nowhere, free to go
            anywhere), for data that lives on its ranks (local shards, caches);
            or a callable ``origin(index) -> rank`` (or ``-1``), called for
            each step's indices when the step is planned. ``None``:
            ``"distributed"`` when the planner has ``locality``, else no
            origins (and no exchange: the plan is then the same as without
            this argument).
        bytes: what moving each sample from its origin costs, for the
            exchange's traffic (``report.bytes_moved``, ``Exchange.bytes_in``)
            and the ``locality`` trade-off: an array with one count per
            dataset index, or a callable ``size(index) -> bytes`` called for
            each step's indices. ``None``: an estimate from the metadata,
            :data:`TEXT_TOKEN_BYTES` (16) per text token plus
            :data:`IMAGE_TOKEN_BYTES` (2,352) per image token: give the real
            sizes when they differ (encoded images, float pixel values).
            Needs origins (given, or from ``locality``).
        num_samples: the dataset's length, required with a callable.
        planner: a ready :class:`microbatch.Planner` (or any object with
            ``ranks`` and ``plan(ids, text_tokens, image_tokens, loss_tokens, **kw)``)
            whose ``ranks`` equal ``num_replicas``; ``None``: one is built from
            ``model``, ``seq_len`` and ``planner_settings``.
        model, seq_len: the planner's cost model and packed sequence length.
        num_replicas, rank: the data-parallel world size and this rank;
            ``None``: ``torch.distributed``'s when it is initialized, else 1 and 0.
        shuffle: a new random order per epoch (``torch.Generator`` seeded
            with ``seed + epoch``, like ``DistributedSampler``); else index order.
        seed: the shuffling seed; must be the same on every rank.
        drop_last: drop the last global batch when it is smaller than
            ``global_batch_size``. Otherwise it is planned as a smaller step;
            if it has fewer than ``num_replicas`` samples (too few for every
            rank to get one) it is merged into the step before instead, so
            every sample is used exactly once per epoch.
        verify: check that every rank planned the same steps: iterating
            :meth:`steps` all-gathers each step's fingerprint before yielding
            it (one small collective per step, fixed-size ``int64`` buffers on
            the process group's device; every rank must iterate) and raises
            :class:`PlanMismatchError` on every rank at the first step that
            differs. A rank that fails planning a step (its metadata callable
            or its planner raises) takes part in that collective with its
            error, so every rank raises at that step instead of waiting for
            it: the planner's own error when every rank failed alike, else a
            :class:`PlanMismatchError` of kind ``"PlanFailed"`` naming the
            failed ranks and carrying the first one's message (its own
            exception chained as ``__cause__`` on that rank). :meth:`verify`
            checks a whole epoch at once, the same way.
        plan_ahead: while a step is used, plan the next one on a background
            thread (the planner releases the GIL), so that planning overlaps
            the training step; an error planning it is raised when the next
            step is asked for, as without ``plan_ahead``.
        planner_settings: the other keyword arguments of :class:`microbatch.Planner`
            (``sync``, ``micro_steps``, ``locality``, ``ranks_per_node``,
            ``max_units``, ``max_images``, ``sequences_per_micro_step``,
            ``refinement``, ``group_scope``); any other name is a
            :class:`microbatch.SettingError`.

    Iterating yields this rank's micro-batches as lists of dataset indices:
    micro-steps 0 to ``A - 1`` of step 0, then those of step 1, and so on. A
    micro-batch may be an empty list (run it anyway: :func:`collate_packed`
    makes an empty batch of it).

    Planning is lazy, one step at a time: the first micro-batch costs one
    step's plan (plus, once, the epoch's permutation and, for a metadata
    callable, reading that step's rows), and the sampler keeps at most
    :data:`KEEP_STEPS` planned steps, so memory is O(one step) beyond the
    O(n) metadata and permutation. ``len(sampler)``, the micro-batches this
    rank yields in the epoch (the same on every rank), needs the dataset's
    length and the micro-steps of every step: it is ``steps x micro_steps``
    without any planning or metadata read when the micro-steps are fixed
    (``micro_steps=`` given); with the fewest micro-steps that fit (the
    default, or a ready ``planner=`` whose setting the sampler cannot read)
    it plans the whole epoch once to count them (O(epoch) time, and every
    row of a metadata callable read; the counts cached per epoch; the last
    planned steps are the first ones, so iteration starts without planning). Every
    rank computes the same plans: each is a pure function of the step's
    samples and the settings.

    Raises:
        SettingError: ``global_batch_size`` below ``num_replicas``, a planner
            for another number of ranks, a rank out of range, a dataset with
            fewer samples than ranks, missing planner settings, an unknown
            keyword argument, ``bytes=`` without origins, unknown ``origins``.
        DtypeError, InvalidValueError: metadata of the wrong shape or values,
            an origin that is not a rank below ``num_replicas`` or ``-1``
            (``item``: the dataset index).

    >>> import numpy as np
    >>> from microbatch.torch import BalancedBatchSampler
    >>> text = 20 + (np.arange(30) * 37) % 200
    >>> images = [[256] if i % 3 == 0 else [] for i in range(30)]
    >>> ranks = [BalancedBatchSampler(text, images, global_batch_size=8, model="qwen2.5-vl-7b",
    ...                               seq_len=1024, num_replicas=2, rank=r) for r in (0, 1)]
    >>> len(ranks[0]) == len(ranks[1])
    True
    >>> sorted(i for s in ranks for batch in s for i in batch) == list(range(30))
    True

    With locality, samples stay on the rank a ``DistributedSampler`` would
    have given them where the step time allows (here within 5%), and each
    step's plan says what still moves:

    >>> s = BalancedBatchSampler(text, images, global_batch_size=8, model="qwen2.5-vl-7b",
    ...                          seq_len=1024, num_replicas=2, rank=0, locality=0.05)
    >>> report = s.steps()[0].plan.report
    >>> report.samples_moved <= 8 and report.bytes_total > 0
    True
    """

    def __init__(
        self,
        text_tokens: Union[Any, Metadata],
        image_tokens: _arrays.Ragged = None,
        *,
        global_batch_size: int,
        loss_tokens: Any = None,
        image_units: _arrays.Ragged = None,
        costs: Any = None,
        origins: Any = None,
        bytes: Any = None,
        num_samples: Optional[int] = None,
        planner: Optional[Any] = None,
        model: Optional[Any] = None,
        seq_len: Optional[int] = None,
        num_replicas: Optional[int] = None,
        rank: Optional[int] = None,
        shuffle: bool = True,
        seed: int = 0,
        drop_last: bool = False,
        verify: bool = False,
        plan_ahead: bool = False,
        **planner_settings: Any,
    ) -> None:
        _known_settings(planner_settings)
        if num_replicas is None or rank is None:
            import torch.distributed as dist

            initialized = dist.is_available() and dist.is_initialized()
            if num_replicas is None:
                num_replicas = dist.get_world_size() if initialized else 1
            if rank is None:
                rank = dist.get_rank() if initialized else 0
        self.num_replicas = _arrays.count(num_replicas, "num_replicas", minimum=1)
        self.rank = _arrays.count(rank, "rank", maximum=self.num_replicas - 1)
        self.global_batch_size = _arrays.count(global_batch_size, "global_batch_size", minimum=1)
        if self.global_batch_size < self.num_replicas:
            raise SettingError(
                f"global_batch_size {self.global_batch_size} is below num_replicas {self.num_replicas}: "
                "every rank needs at least one sample per step",
                item="global_batch_size",
            )
        self.seed = _arrays.count(seed, "seed", minimum=-(2**63), maximum=2**63 - 1)
        self.shuffle = bool(shuffle)
        self.drop_last = bool(drop_last)
        self.verify_plans = bool(verify)
        self.plan_ahead = bool(plan_ahead)
        self.epoch = 0

        fixed = planner_settings.get("micro_steps") if planner is None else getattr(planner, "micro_steps", None)
        self.planner = planner = planner_for(
            planner, model, seq_len, planner_settings, ranks=self.num_replicas, ranks_are="num_replicas is"
        )
        #: The micro-steps of every step when the planner's setting fixes them (``len()`` then plans nothing).
        self.micro_steps: Optional[int] = fixed if isinstance(fixed, int) and not isinstance(fixed, bool) else None

        if callable(text_tokens):
            if image_tokens is not None or loss_tokens is not None:
                raise SettingError(
                    "with a metadata callable, return image and loss tokens from it instead of "
                    "passing image_tokens= or loss_tokens=",
                    item="image_tokens" if image_tokens is not None else "loss_tokens",
                )
            if num_samples is None:
                raise SettingError("a metadata callable needs num_samples= (the dataset's length)", item="num_samples")
            self._n = _arrays.count(num_samples, "num_samples")
            self._rows: Union[_ArrayRows, _CallableRows] = _CallableRows(text_tokens, self._n)
        else:
            self._rows = _ArrayRows(text_tokens, image_tokens, loss_tokens)
            self._n = self._rows.n
            if num_samples is not None and _arrays.count(num_samples, "num_samples") != self._n:
                raise DtypeError(
                    f"num_samples is {num_samples} but text_tokens has {self._n} entries", item="num_samples"
                )
        self._units: Any = image_units
        self._units_parsed: Optional[Tuple[np.ndarray, np.ndarray]] = None
        # Read and shaped once: (n, 2) float64 (vision, language); the values are checked when planned.
        self._costs: Optional[np.ndarray] = None if costs is None else _costs(_cost_values(costs), self._n)
        self._origins: Any = _origins_setting(origins, self._n, self.num_replicas, getattr(planner, "locality", None))
        if bytes is not None and self._origins is None:
            raise SettingError(
                "bytes= sizes the exchange, which needs origins: give origins= (or locality=, whose origins "
                "are the ranks a DistributedSampler would have used)",
                item="bytes",
            )
        self._bytes: Any = (
            bytes if bytes is None or callable(bytes) else _arrays.integers(bytes, "bytes", np.uint64, length=self._n)
        )
        self._verified_epoch: Optional[int] = None
        self._init_state()

    def _init_state(self) -> None:
        """The planning state: the kept steps, the epoch's order and micro-step counts."""
        self._lock = threading.Lock()  # the kept steps
        self._prep_lock = threading.Lock()  # reading the metadata, the epoch's order
        self._planned: Dict[Tuple[int, int], "Future[Step]"] = {}
        self._order_cache: Optional[Tuple[int, np.ndarray]] = None
        self._counts: Optional[Tuple[int, List[int]]] = None
        self._ahead: Optional[ThreadPoolExecutor] = None  # plan_ahead's thread, started on first use

    # --- metadata ---------------------------------------------------------

    def _step_rows(
        self, idx: np.ndarray
    ) -> Tuple[np.ndarray, Tuple[np.ndarray, np.ndarray], Optional[np.ndarray], Optional[Tuple[np.ndarray, np.ndarray]]]:
        """The metadata of the indices ``idx`` (a step's): text, images, loss tokens and image units, read
        and checked as needed (thread-safe: the planning thread may plan a step meanwhile). O(len(idx))."""
        with self._prep_lock:
            text, images, loss = self._rows.rows(idx)
            if self._units is None:
                return text, images, loss, None
            if self._units_parsed is None:  # once; checked against the images step by step
                self._units_parsed = _arrays.ragged(self._units, "image_units", self._n, np.uint32)
            units = _gather_ragged(*self._units_parsed, idx)
            if not np.array_equal(units[1], images[1]):
                per = np.diff(units[1].astype(np.int64)) != np.diff(images[1].astype(np.int64))
                i = int(idx[int(np.flatnonzero(per)[0])])
                raise DtypeError(
                    f"image_units must give one unit count per image, in the shape of image_tokens (index {i} "
                    "has another number of units than of images)",
                    item=i,
                )
            return text, images, loss, units

    def __len__(self) -> int:
        """The micro-batches this rank yields in the current epoch (the same on every rank).

        ``steps x micro_steps`` when the micro-steps are fixed, without
        planning; otherwise the epoch is planned once to count them.
        """
        if self.micro_steps is not None:
            return self._count() * self.micro_steps
        return sum(self._micro_step_counts(self.epoch))

    def set_epoch(self, epoch: int) -> None:
        """Sets the epoch: with ``shuffle``, every epoch gets another order (call it on every rank)."""
        self.epoch = _arrays.count(epoch, "epoch")

    # --- the epoch's batches ------------------------------------------------

    def _count(self) -> int:
        """The steps of an epoch (the same for every epoch): O(1)."""
        n, b = self._n, self.global_batch_size
        full, rest = divmod(n, b)
        if rest and not self.drop_last:
            if rest >= self.num_replicas:
                return full + 1
            if not full:
                raise SettingError(
                    f"the dataset has {n} samples, fewer than num_replicas {self.num_replicas}: "
                    "every rank needs at least one sample per step",
                    item="num_samples",
                )
        return full

    def _bounds(self, k: int) -> Tuple[int, int]:
        """Step ``k``'s positions ``[start, end)`` in the epoch's order: the last step ends at ``n``
        unless ``drop_last`` (a remainder below ``num_replicas`` is merged into it)."""
        b = self.global_batch_size
        last = k == self._count() - 1 and self._n % b and not self.drop_last
        return k * b, self._n if last else (k + 1) * b

    def _order(self, epoch: int) -> np.ndarray:
        """The epoch's permutation of the indices (``DistributedSampler``'s), kept for the current epoch."""
        with self._prep_lock:
            if self._order_cache is None or self._order_cache[0] != epoch:
                if self.shuffle:
                    g = torch.Generator()
                    g.manual_seed(self.seed + epoch)
                    order = torch.randperm(self._n, generator=g).numpy().astype(np.int64)
                else:
                    order = np.arange(self._n, dtype=np.int64)
                self._order_cache = (epoch, order)
            return self._order_cache[1]

    def batches(self) -> List[np.ndarray]:
        """The current epoch's global batches as arrays of dataset indices (every rank's).

        The order follows the epoch's permutation; the last batch is
        dropped, kept or merged into the one before as ``drop_last`` says.
        No planning and no metadata read: O(n) for the permutation.
        """
        count = self._count()
        order = self._order(self.epoch)
        return [order[slice(*self._bounds(k))] for k in range(count)]

    # --- planning ---------------------------------------------------------

    def _plan(self, epoch: int, k: int) -> Plan:
        """Plans step ``k`` of ``epoch``: O(the step's samples) memory."""
        start, end = self._bounds(k)
        idx = self._order(epoch)[start:end]
        text, img, loss, units = self._step_rows(idx)
        kw: Dict[str, Any] = {}
        if units is not None:
            kw["image_units"] = units
        if self._costs is not None:
            kw["costs"] = self._costs[idx]
        if self._origins is not None:
            kw["origins"] = self._step_origins(idx, start)
            kw["bytes"] = self._step_bytes(idx, text, img)
        return self.planner.plan(idx.astype(np.uint64), text, img, loss, **kw)

    def _step_origins(self, idx: np.ndarray, start: int) -> np.ndarray:
        o = self._origins
        if isinstance(o, str):  # "distributed": position p of the order is DistributedSampler's rank p % R
            return np.arange(start, start + idx.shape[0], dtype=np.int64) % self.num_replicas
        if isinstance(o, np.ndarray):
            return o[idx]
        return np.array([_origin_of(o, int(i), self.num_replicas) for i in idx], dtype=np.int64)

    def _step_bytes(self, idx: np.ndarray, text: np.ndarray, img: Tuple[np.ndarray, np.ndarray]) -> np.ndarray:
        b = self._bytes
        if b is None:
            values, offsets = img
            cum = np.zeros(values.shape[0] + 1, dtype=np.uint64)
            np.cumsum(values, dtype=np.uint64, out=cum[1:])
            off = offsets.astype(np.int64)
            per = cum[off[1:]] - cum[off[:-1]]
            return text.astype(np.uint64) * np.uint64(TEXT_TOKEN_BYTES) + per * np.uint64(IMAGE_TOKEN_BYTES)
        if isinstance(b, np.ndarray):
            return b[idx]
        return np.array([_size_of(b, int(i)) for i in idx], dtype=np.uint64)

    def _claim(self, epoch: int, k: int) -> Tuple["Future[Step]", bool]:
        """Step ``k``'s future and whether the caller must plan it (it was not kept or in progress)."""
        with self._lock:
            fut = self._planned.get((epoch, k))
            if fut is not None:
                return fut, False
            fut = Future()
            self._planned[(epoch, k)] = fut
            while len(self._planned) > KEEP_STEPS:  # the oldest planned first
                del self._planned[next(iter(self._planned))]
            return fut, True

    def _fill(self, fut: "Future[Step]", epoch: int, k: int) -> None:
        try:
            step = Step(k, epoch, self.rank, self._plan(epoch, k))
        except BaseException as e:  # noqa: B036 - handed to whoever waits, then raised there
            with self._lock:
                if self._planned.get((epoch, k)) is fut:
                    del self._planned[(epoch, k)]  # not kept: asking again plans again (and raises again)
            fut.set_exception(e)
            return
        fut.set_result(step)

    def _step(self, epoch: int, k: int, *, ahead: bool = False) -> Step:
        """Step ``k`` of ``epoch``, kept or planned now; with ``ahead`` and ``plan_ahead``, step ``k + 1``
        starts planning on a background thread."""
        fut, mine = self._claim(epoch, k)
        if mine:
            self._fill(fut, epoch, k)
        step = fut.result()
        if ahead and self.plan_ahead and k + 1 < self._count():
            nxt, mine = self._claim(epoch, k + 1)
            if mine:
                with self._lock:
                    if self._ahead is None:
                        # One thread per sampler, kept: a thread a step would leave a malloc arena each.
                        self._ahead = ThreadPoolExecutor(max_workers=1, thread_name_prefix="microbatch-plan")
                    ahead_pool = self._ahead
                ahead_pool.submit(self._fill, nxt, epoch, k + 1)
        return step

    def _micro_step_counts(self, epoch: int) -> List[int]:
        """Every step's micro-steps, planned from the last step to the first (so the first are kept)."""
        if self._counts is None or self._counts[0] != epoch:
            count = self._count()
            counts = [0] * count
            for k in reversed(range(count)):
                counts[k] = self._step(epoch, k).micro_steps
            self._counts = (epoch, counts)
        return self._counts[1]

    def steps(self) -> Steps:
        """The current epoch's steps for this rank, in the order the micro-batches are yielded, planned on demand.

        Zip them with the loader: step ``k`` owns the next ``step.micro_steps``
        batches. The returned :class:`Steps` is a lazy sequence: iterating
        plans one step at a time (each step planned once when the loader's
        iteration of this sampler runs at most :data:`KEEP_STEPS` steps
        ahead) and, with ``verify=True``, checks each step across ranks
        before yielding it; ``list(sampler.steps())`` holds the whole epoch's
        plans (O(epoch) memory and time). A metadata callable is read as
        steps are planned (a step's rows when it is), not here.
        """
        return Steps(self, self.epoch)

    def verify(self, *, group: Any = None) -> None:
        """Checks that every rank planned the same epoch; raises :class:`PlanMismatchError` if not.

        Plans the whole epoch (O(epoch) time; only the fingerprints are
        kept) and all-gathers them (two ``all_gather`` of ``int64``
        tensors); every rank of ``group`` must call it. A rank that fails
        planning a step takes part with its error and every rank raises (see
        ``verify=``). Does nothing without an initialized process group (an
        error planning is then raised as it is). After it, iterating
        :meth:`steps` checks nothing more this epoch.
        """
        epoch = self.epoch
        fingerprints: List[int] = []
        try:
            for k in range(self._count()):
                fingerprints.append(self._step(epoch, k).fingerprint)
        except Exception as e:
            _verify_fingerprints(fingerprints, group=group, first=0, error=e, failed_step=len(fingerprints))
            raise  # unreachable: every rank raised above
        _verify_fingerprints(fingerprints, group=group, first=0)
        self._verified_epoch = epoch

    def __iter__(self) -> Iterator[List[int]]:
        epoch = self.epoch
        for k in range(self._count()):
            step = self._step(epoch, k, ahead=True)
            for j in range(step.micro_steps):
                yield step.micro_batch(j)

    def __repr__(self) -> str:
        extra = "" if self._origins is None else f", origins={self._origins if isinstance(self._origins, str) else '...'}"
        return (
            f"BalancedBatchSampler(samples={self._n}, global_batch_size={self.global_batch_size}, "
            f"rank={self.rank}/{self.num_replicas}, epoch={self.epoch}{extra}, planner={self.planner!r})"
        )


def _known_settings(settings: Mapping[str, Any]) -> None:
    """Raises a SettingError naming the first keyword that is neither the sampler's nor a planner setting."""
    unknown = sorted(set(settings) - set(_PLANNER_SETTINGS))
    if not unknown:
        return
    name = unknown[0]
    own = [p for p in inspect.signature(BalancedBatchSampler.__init__).parameters if p not in ("self", "planner_settings")]
    if name == "ranks":
        hint = ": the sampler's ranks are num_replicas="
    else:
        close = difflib.get_close_matches(name, own + list(_PLANNER_SETTINGS), n=1)
        hint = f": did you mean {close[0]!r}?" if close else ""
    raise SettingError(
        f"BalancedBatchSampler has no setting {name!r}{hint} (it takes {', '.join(own)} and the planner "
        f"settings {', '.join(_PLANNER_SETTINGS)})",
        item=name,
    )


def _origins_setting(origins: Any, n: int, ranks: int, locality: Any) -> Any:
    """``origins=`` checked: ``None`` (none), ``"distributed"``, a callable, or an ``int64`` array of ``n`` ranks or ``-1``."""
    if origins is None:
        return None if locality is None else "distributed"
    if isinstance(origins, str):
        if origins != "distributed":
            raise SettingError(
                f"unknown origins {origins!r}: use 'distributed', an array with one rank per dataset index "
                "(-1 for none) or a callable index -> rank",
                item="origins",
            )
        return origins
    if callable(origins):
        return origins
    a = _arrays.array(origins, "origins")
    if a.ndim != 1 or (a.size and a.dtype.kind not in "iu"):
        raise DtypeError(
            f"origins must be a 1-D array of integer ranks, got dtype {a.dtype} and shape {a.shape}", item="origins"
        )
    if a.shape[0] != n:
        raise DtypeError(f"origins has {a.shape[0]} entries, expected {n} (one per dataset index)", item="origins")
    bad = np.flatnonzero((a >= ranks) | ((a < -1) if a.dtype.kind == "i" else False))
    if bad.size:
        i = int(bad[0])
        raise InvalidValueError(
            f"origins[{i}] is {a[i]}: it must be a rank below num_replicas {ranks}, or -1 for a sample held nowhere",
            item=i,
        )
    return a.astype(np.int64)


def _origin_of(origin: Callable[[int], Any], i: int, ranks: int) -> int:
    try:
        r = _integer(origin(i), f"the origins callable's value for index {i}", i)
    except Error:
        raise
    except TypeError:
        raise DtypeError(f"the origins callable returned a non-integer for index {i}", item=i) from None
    if not -1 <= r < ranks:
        raise InvalidValueError(
            f"the origins callable returned {r} for index {i}: return a rank below num_replicas {ranks}, or -1",
            item=i,
        )
    return r


def _size_of(size: Callable[[int], Any], i: int) -> int:
    try:
        b = _integer(size(i), f"the bytes callable's value for index {i}", i)
    except Error:
        raise
    except TypeError:
        raise DtypeError(f"the bytes callable returned a non-integer for index {i}", item=i) from None
    if not 0 <= b < 2**64:
        raise InvalidValueError(f"the bytes callable returned {b} for index {i}: sizes are non-negative", item=i)
    return b


def _integer(v: Any, name: str, item: Any) -> int:
    """One integer a callable returned (a Python or numpy integer, a 0-d integer tensor or array);
    ``TypeError`` for anything else (the callers name it), :class:`DtypeError` for a tensor that
    cannot be read (:func:`microbatch._arrays.array`)."""
    if isinstance(v, int):
        return operator.index(v)
    a = _arrays.array(v, name, item=item)
    if a.ndim != 0 or a.dtype.kind not in "iub":
        raise TypeError(name)
    return operator.index(a.item())


def _gather_ragged(values: np.ndarray, offsets: np.ndarray, idx: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """The rows ``idx`` of a CSR ragged array, as ``(values, offsets)`` (vectorized)."""
    off = offsets.astype(np.int64)
    starts = off[idx]
    lengths = off[idx + 1] - starts
    new = np.zeros(idx.shape[0] + 1, dtype=np.int64)
    np.cumsum(lengths, out=new[1:])
    pos = np.repeat(starts - new[:-1], lengths) + np.arange(new[-1], dtype=np.int64)
    return values[pos], new.astype(np.uint64)


class _ArrayRows:
    """Metadata given as arrays: checked once at construction, a step's rows gathered by index."""

    def __init__(self, text: Any, images: _arrays.Ragged, loss: Any) -> None:
        self.text = _arrays.integers(text, "text_tokens", np.uint32)
        self.n = self.text.shape[0]
        self.images = _arrays.ragged(images, "image_tokens", self.n, np.uint32)
        self.loss = None if loss is None else _arrays.integers(loss, "loss_tokens", np.uint64, length=self.n)

    def rows(self, idx: np.ndarray) -> Tuple[np.ndarray, Tuple[np.ndarray, np.ndarray], Optional[np.ndarray]]:
        """Text, images ``(values, offsets)`` and loss tokens (``None``: all text tokens) of ``idx``: O(len(idx))."""
        loss = None if self.loss is None else self.loss[idx]
        return self.text[idx], _gather_ragged(*self.images, idx), loss


class _CallableRows:
    """A metadata callable's rows, read when a step that holds their index is planned, and kept.

    Each index is read at most once per sampler (a row that raises stays
    unread). Memory: O(n) zero-initialized arrays, touched only where read
    (25 bytes an index read), and the images' token counts read so far in one
    growing array (amortized O(1) an image).
    """

    def __init__(self, meta: Metadata, n: int) -> None:
        self.meta = meta
        self.n = n
        self.read = np.zeros(n, dtype=bool)
        self.text = np.zeros(n, dtype=np.uint32)
        self.loss = np.zeros(n, dtype=np.uint64)
        self.start = np.zeros(n, dtype=np.int64)  # the index's first image in self.values
        self.count = np.zeros(n, dtype=np.uint32)  # its images
        self.values = np.zeros(64, dtype=np.uint32)
        self.used = 0
        self.with_loss: Optional[bool] = None  # rows of 3 (True) or 2 (False), set by the first row read

    def rows(self, idx: np.ndarray) -> Tuple[np.ndarray, Tuple[np.ndarray, np.ndarray], Optional[np.ndarray]]:
        """As :meth:`_ArrayRows.rows`, reading the rows not read yet in ``idx``'s order: O(len(idx)) plus the
        callable's calls."""
        for i in idx[~self.read[idx]].tolist():
            self._read(i)
        starts = self.start[idx]
        lengths = self.count[idx].astype(np.int64)
        offsets = np.zeros(idx.shape[0] + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        pos = np.repeat(starts - offsets[:-1], lengths) + np.arange(offsets[-1], dtype=np.int64)
        loss = self.loss[idx] if self.with_loss else None
        return self.text[idx], (self.values[pos], offsets.astype(np.uint64)), loss

    def _read(self, i: int) -> None:
        """Reads and checks row ``i``; nothing is kept when it raises (the errors name the index)."""
        row = self.meta(i)
        if not isinstance(row, (tuple, list)) or len(row) not in (2, 3):
            raise DtypeError(
                f"the metadata callable returned {type(row).__name__} for index {i}: return a tuple "
                "(text_tokens, image_tokens[, loss_tokens])",
                item=i,
            )
        with_loss = len(row) == 3
        if self.with_loss is not None and with_loss != self.with_loss:
            raise DtypeError(
                f"the metadata callable returned {len(row)} values for index {i} and {5 - len(row)} for the "
                "indices read before: loss tokens must be given for every index or for none",
                item=i,
            )
        try:
            text = _integer(row[0], f"text_tokens[{i}]", i)
            loss = _integer(row[2], f"loss_tokens[{i}]", i) if with_loss else 0
        except Error:
            raise
        except (TypeError, ValueError, OverflowError):
            raise DtypeError(f"the metadata callable returned a non-integer token count for index {i}: {row!r}", item=i) from None
        for name, v, top in (("text_tokens", text, 2**32 - 1), ("loss_tokens", loss, 2**64 - 1)):
            if not 0 <= v <= top:
                raise InvalidValueError(f"{name}[{i}] is {v}: it must be between 0 and {top}", item=i)
        images = _arrays.array(() if row[1] is None else row[1], f"image_tokens[{i}]", item=i)
        if images.ndim != 1:
            raise DtypeError(
                f"image_tokens[{i}] must be a 1-D list or array of the sample's values, got "
                + ("a scalar: wrap it in a list" if images.ndim == 0 else f"shape {images.shape}"),
                item=i,
            )
        if images.size and images.dtype.kind not in "iu":
            raise DtypeError(f"image_tokens[{i}] must hold integers, got dtype {images.dtype}", item=i)
        if images.size and not (images.min() >= 0 and images.max() <= 2**32 - 1):
            bad = images[(images < 0) | (images > 2**32 - 1)][0]
            raise InvalidValueError(f"image_tokens[{i}] holds {bad}: it must be between 0 and {2**32 - 1}", item=i)
        k = images.shape[0]
        if self.used + k > self.values.shape[0]:
            grown = np.zeros(max(2 * self.values.shape[0], self.used + k), dtype=np.uint32)
            grown[: self.used] = self.values[: self.used]
            self.values = grown
        self.values[self.used : self.used + k] = images
        self.start[i], self.count[i] = self.used, k
        self.used += k
        self.text[i], self.loss[i] = text, loss
        self.with_loss = with_loss
        self.read[i] = True


# --- packed sequences --------------------------------------------------------



#: The sample keys :func:`collate_packed` packs per token, like ``input_ids``.
TOKEN_KEYS = ("token_type_ids", "mm_token_type_ids")


def collate_packed(
    samples: Sequence[Dict[str, Any]],
    *,
    label_pad: int = IGNORE_INDEX,
    token_keys: Sequence[str] = TOKEN_KEYS,
) -> Dict[str, Any]:
    """Packs a micro-batch's samples into one row, in the layout of Hugging Face's ``DataCollatorWithFlattening``.

    For a Hugging Face model use :class:`microbatch.hf.PackedCollator`
    instead: ``model(**collate_packed(...))`` runs with the model's cache on
    (transformers then ignores the packing), 1-D positions for multimodal
    RoPE, and key names transformers does not read.

    Args:
        samples: dicts with ``input_ids`` (a 1-D tensor, array or list of
            ints) and optionally ``labels`` (the same length; when absent, the
            ``input_ids`` serve as labels).
        label_pad: the label put at the first position of every sample, so
            that the shifted loss never predicts one sample from another.
        token_keys: the keys that hold one value per token (``(L,)`` or
            ``(1, L)`` per sample), packed like ``input_ids``.

    Returns a dict with:

    - ``input_ids``: ``(1, T)`` int64, the samples concatenated;
    - ``labels``: ``(1, T)`` int64, each sample's labels with its first
      position set to ``label_pad``;
    - ``position_ids``: ``(1, T)`` int64, ``0, 1, ...`` restarting at every sample;
    - ``cu_seqlens``: ``(n + 1,)`` int32, the cumulative sample lengths
      (``cu_seq_lens_q``/``cu_seq_lens_k`` of flash-attention's varlen kernels);
    - ``max_length``: the longest sample's length (an int);
    - each of ``token_keys`` present: ``(1, T)``, packed like ``input_ids``
      (every sample must have it: a sample without it could not be aligned);
    - every other tensor (or array) key: concatenated along dim 0 over the
      samples that have it, in sample order (per-image rows: ``pixel_values``,
      ``image_grid_thw``, ...);
    - every other key: a list with one entry per sample, ``None`` for the
      samples without it.

    Tensors are detached (a sample's tensor that requires grad is copied as
    data). An empty micro-batch gives ``T = 0`` (and ``cu_seqlens == [0]``):
    run it anyway.

    Raises:
        InputError: a sample that is not a dict with ``input_ids``, a token
            key that some samples lack.
        DtypeError: a value that is not a tensor of the expected shape and
            dtype, or tensors that cannot be concatenated (naming the sample
            and key).

    >>> from microbatch.torch import collate_packed
    >>> b = collate_packed([{"input_ids": [5, 6, 7], "id": "a"}, {"input_ids": [8, 9], "labels": [-100, 4]}])
    >>> b["input_ids"].tolist(), b["labels"].tolist(), b["position_ids"].tolist()
    ([[5, 6, 7, 8, 9]], [[-100, 6, 7, -100, 4]], [[0, 1, 2, 0, 1]])
    >>> b["cu_seqlens"].tolist(), b["max_length"], b["id"]
    ([0, 3, 5], 3, ['a', None])
    >>> collate_packed([])["input_ids"].shape
    torch.Size([1, 0])
    """
    token_keys = tuple(token_keys)
    ids: List[torch.Tensor] = []
    labels: List[torch.Tensor] = []
    per_token: Dict[str, List[Optional[torch.Tensor]]] = {}
    extra: Dict[str, List[Tuple[int, Any]]] = {}
    for i, s in enumerate(samples):
        if not isinstance(s, Mapping) or "input_ids" not in s:
            raise InputError(f"sample {i} is not a dict with 'input_ids': got {type(s).__name__}", item=i)
        x = tokens(s["input_ids"], f"sample {i}: input_ids", i)
        y = x.clone() if s.get("labels") is None else tokens(s["labels"], f"sample {i}: labels", i).clone()
        if y.shape != x.shape:
            raise DtypeError(
                f"sample {i}: labels has {y.shape[0]} positions but input_ids has {x.shape[0]}", item=i
            )
        if y.numel():
            y[0] = label_pad
        ids.append(x)
        labels.append(y)
        for k, v in s.items():
            if k in ("input_ids", "labels"):
                continue
            if k in token_keys:
                t = tokens(v, f"sample {i}: {k}", i, integer=False)
                if t.shape[0] != x.shape[0]:
                    raise DtypeError(
                        f"sample {i}: {k} must hold one value per token ({x.shape[0]}), got shape {tuple(t.shape)}",
                        item=i,
                    )
                per_token.setdefault(k, [None] * i).append(t)
            else:
                extra.setdefault(k, []).append((i, v))
        for k, ts in per_token.items():
            if len(ts) < i + 1:
                ts.append(None)
    n = len(ids)
    lengths = [t.shape[0] for t in ids]
    cu, positions = packed_layout(lengths)
    out: Dict[str, Any] = {
        "input_ids": (torch.cat(ids) if ids else torch.zeros(0, dtype=torch.int64)).unsqueeze(0),
        "labels": (torch.cat(labels) if labels else torch.zeros(0, dtype=torch.int64)).unsqueeze(0),
        "position_ids": positions.unsqueeze(0),
        "cu_seqlens": cu,
        "max_length": max(lengths, default=0),
    }
    for k, parts in per_token.items():
        missing = [j for j, t in enumerate(parts) if t is None]
        if missing:
            raise InputError(
                f"sample {missing[0]} has no {k!r} but other samples have: a per-token key must be in every "
                "sample (or in none)",
                item=missing[0],
            )
        try:
            out[k] = torch.cat([t for t in parts if t is not None]).unsqueeze(0)
        except RuntimeError as e:
            raise DtypeError(f"the samples' {k!r} cannot be packed: {e}", item=k) from None
    for k, pairs in extra.items():
        if all(isinstance(v, (torch.Tensor, np.ndarray)) for _, v in pairs):
            rows = [(j, as_tensor(v, f"sample {j}: {k}", j)) for j, v in pairs]
            rows = [(j, t.reshape(1) if t.dim() == 0 else t) for j, t in rows]
            for (j, t), (_, t0) in zip(rows[1:], rows):
                if t.shape[1:] != t0.shape[1:]:
                    raise DtypeError(
                        f"sample {j}: {k} has shape {tuple(t.shape)}, which cannot be concatenated along dim 0 "
                        f"with the shape {tuple(t0.shape)} of the sample before it",
                        item=j,
                    )
            try:
                out[k] = torch.cat([t for _, t in rows])
            except RuntimeError as e:
                raise DtypeError(f"the samples' {k!r} tensors cannot be concatenated along dim 0: {e}", item=k) from None
        else:
            aligned: List[Any] = [None] * n
            for j, v in pairs:
                aligned[j] = v
            out[k] = aligned
    return out


#: The sample keys that carry images or videos (a key starting with one of
#: these): a sample holding one must have its image tokens counted
#: (:func:`sample_tokens`).
VISION_KEY_PREFIXES: Tuple[str, ...] = ("pixel_", "image", "video")


def sample_tokens(
    sample: Mapping[str, Any],
    *,
    placeholders: Sequence[int] = (),
    image_keys: Optional[Sequence[str]] = None,
    ignore_index: int = IGNORE_INDEX,
    index: Any = None,
) -> Tuple[int, List[int], int]:
    """One sample's planner metadata ``(text_tokens, image_tokens, loss_tokens)``, read from the sample as a processor makes it.

    The row a :class:`BalancedBatchSampler` metadata callable returns, for a
    vision-language model of any family whose processor expands each image
    (or video) into placeholder tokens in ``input_ids`` (LLaVA, InternVL,
    Qwen2-VL, Gemma 3, Idefics3, Mistral3, ...):

    - ``image_tokens``: each run of consecutive placeholder tokens (tokens
      whose id is in ``placeholders``, one id repeated) is one image, its
      length the image's tokens. A run is what the processor marks apart:
      an image, or a tile, a frame or a row where the family's processor
      puts other tokens between them (Idefics3's tiles, Qwen3-VL's frames,
      Pixtral's rows): their sum is the sample's image tokens either way,
      and the vision cost is planned per run (so is ``max_images``).
      Two images with no token between them are one run: give the
      metadata yourself where that matters.
    - ``text_tokens``: the other tokens of ``input_ids``.
    - ``loss_tokens``: :func:`loss_tokens` of ``labels`` (of ``input_ids``
      when the sample has no labels).

    ``placeholders`` are the model's image and video placeholder token ids
    (for a transformers model, ``microbatch.hf.trainer.placeholder_ids(model)``
    reads them from its config).

    Args:
        sample: a dict with ``input_ids`` (``(L,)`` or ``(1, L)``) and
            optionally ``labels`` and the processor's image inputs.
        placeholders: the placeholder token ids; empty for a text model.
        image_keys: the sample keys that carry images; ``None``: every key
            starting with one of :data:`VISION_KEY_PREFIXES`.
        ignore_index: the label value without loss.
        index: the sample's dataset index, named by the errors.

    Raises:
        InputError: the sample holds images (a key of ``image_keys``, such
            as ``pixel_values``, that is not ``None``) but no
            placeholder id is given, or none of its ``input_ids`` is a
            placeholder (a sample whose images were not expanded into
            placeholders by the processor): its image tokens cannot be
            counted, and it is never planned as text. Give the metadata
            yourself then.
        DtypeError: ``input_ids`` or ``labels`` of the wrong shape or dtype
            (``labels`` of another length than ``input_ids``), placeholders
            that are not integers.

    >>> from microbatch.torch import sample_tokens
    >>> import torch
    >>> IMAGE = 9   # the model's image placeholder id (config.image_token_id)
    >>> s = {"input_ids": [1, 5] + [IMAGE] * 4 + [6, 7] + [IMAGE] * 2,
    ...      "pixel_values": torch.zeros(2, 3, 8, 8), "labels": [-100] * 8 + [7, 8]}
    >>> sample_tokens(s, placeholders=[IMAGE])
    (4, [4, 2], 2)
    >>> sample_tokens(s)   # the image tokens cannot be counted  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    microbatch.errors.InputError: the sample holds images (pixel_values) but no image placeholder token id is known, ...
    >>> sample_tokens({"input_ids": [1, 2, 3]})   # text
    (3, [], 2)
    """
    where = "the sample" if index is None else f"sample {index}"
    item = "input_ids" if index is None else index
    if not isinstance(sample, Mapping) or "input_ids" not in sample:
        raise InputError(f"{where} is not a dict with 'input_ids' ({type(sample).__name__})", item=item)
    ids = tokens(sample["input_ids"], f"{where}'s input_ids", item)
    vision = sorted(
        k for k, v in sample.items()
        if isinstance(k, str) and v is not None
        and (k.startswith(VISION_KEY_PREFIXES) if image_keys is None else k in image_keys)
    )
    images: List[int] = []
    try:
        known = sorted({operator.index(p) for p in placeholders})
    except TypeError:
        raise DtypeError(f"placeholders must be token ids (integers), got {placeholders!r}", item="placeholders") from None
    if known and ids.numel():
        mask = torch.isin(ids, torch.tensor(known, dtype=ids.dtype))
        if bool(mask.any()):
            # A run starts at a placeholder after a non-placeholder or after another placeholder id.
            start = mask.clone()
            start[1:] &= ~mask[:-1] | (ids[1:] != ids[:-1])
            run = torch.cumsum(start.long(), 0)[mask] - 1
            images = torch.bincount(run).tolist()
    if vision and not images:
        if not known:
            raise InputError(
                f"{where} holds images ({', '.join(vision)}) but no image placeholder token id is known, so its "
                "image tokens cannot be counted: pass placeholders= (the model config's image_token_id / "
                "image_token_index, video_token_id / video_token_index), or give the metadata yourself "
                "(text_tokens= and image_tokens=)",
                item=item,
            )
        raise InputError(
            f"{where} holds images ({', '.join(vision)}) but none of its {ids.numel()} input_ids is an image "
            f"placeholder (ids {known}): its input_ids must hold the placeholders as the model's processor "
            "expands them (one a token of each image), or give the metadata yourself (text_tokens= and "
            "image_tokens=)",
            item=item,
        )
    labels = sample.get("labels")
    target = ids if labels is None else tokens(labels, f"{where}'s labels", item)
    if target.shape != ids.shape:
        raise DtypeError(
            f"{where} has {target.numel()} labels but {ids.numel()} input_ids: give one label a token", item=item
        )
    return int(ids.numel()) - sum(images), images, loss_tokens(target, ignore_index=ignore_index)


def loss_tokens(labels: Any, *, ignore_index: int = IGNORE_INDEX) -> int:
    """The loss tokens of one sample: what the planner's ``loss_tokens`` must hold for it.

    The positions ``t >= 1`` with ``labels[t] != ignore_index``: after the
    label shift (logits at ``t - 1`` predict ``labels[t]``) these are the
    positions a cross-entropy with ``ignore_index`` counts. Position 0 never
    carries loss: :func:`collate_packed` masks it so that no sample is
    predicted from the one packed before it.

    >>> from microbatch.torch import loss_tokens
    >>> loss_tokens([-100, -100, 7, 8, -100, 9])
    3
    >>> loss_tokens([4, 5])  # position 0 is masked when packed
    1
    """
    return loss_token_count(labels, ignore_index)


def summed_loss(
    logits: Any,
    labels: Any,
    cu_seqlens: Any = None,
    normalization: str = "token",
    *,
    ignore_index: int = IGNORE_INDEX,
) -> torch.Tensor:
    """A packed micro-batch's *summed* loss: multiply it by the step's loss scale before backward.

    Args:
        logits: ``(1, T, V)`` or ``(T, V)``, the model's output for the packed
            row, or the output itself: anything with a ``.logits`` (a
            transformers ``ModelOutput``) or a dict with ``"logits"``.
        labels: ``(1, T)`` or ``(T,)`` from :func:`collate_packed` (first position
            of every sample already ``ignore_index``), or the whole batch (a
            dict: its ``labels``, and its sample boundaries from
            ``cu_seq_lens_q``, ``cu_seqlens`` or ``position_ids``).
        cu_seqlens: the samples' cumulative lengths (``cu_seqlens`` of
            :func:`collate_packed`, ``cu_seq_lens_q`` of a Hugging Face batch);
            needed for ``"sample"`` only, and taken from the batch when
            ``labels`` is one. With a batch, the normalization may be given in
            its place: ``summed_loss(output, batch, "sample")``.
        normalization: ``"token"``: the sum of the cross-entropies of every
            loss token; ``"sample"``: the sum over samples of each sample's
            mean cross-entropy (a sample without loss tokens adds 0).

    The result stays connected to ``logits`` even when the micro-batch is
    empty or carries no loss token (a zero with a gradient of zeros), so the
    backward runs on every rank.

    >>> import torch
    >>> from microbatch.torch import collate_packed, summed_loss
    >>> b = collate_packed([{"input_ids": [1, 2, 3]}, {"input_ids": [1, 2]}])
    >>> logits = torch.zeros(1, 5, 4, requires_grad=True)  # uniform: each token costs log 4
    >>> round(summed_loss(logits, b["labels"], b["cu_seqlens"], "token").item(), 4)  # 3 loss tokens
    4.1589
    >>> round(summed_loss(logits, b["labels"], b["cu_seqlens"], "sample").item(), 4)  # 2 samples
    2.7726
    >>> round(summed_loss({"logits": logits}, b, "sample").item(), 4)  # the output and the batch
    2.7726
    """
    if isinstance(cu_seqlens, str) and isinstance(labels, Mapping):
        cu_seqlens, normalization = None, cu_seqlens
    normalization = _native.normalization(normalization)  # the crate reads the name (its SettingError)
    if not isinstance(logits, torch.Tensor):
        out = logits
        logits = out.get("logits") if isinstance(out, Mapping) else getattr(out, "logits", None)
        if not isinstance(logits, torch.Tensor):
            raise DtypeError(
                f"logits must be a tensor, a model output with .logits or a dict with 'logits', got {type(out).__name__}",
                item="logits",
            )
    if isinstance(labels, Mapping):
        batch = labels
        if "labels" not in batch:
            raise InputError("the batch has no 'labels'", item="labels")
        labels = batch["labels"]
        if cu_seqlens is None and normalization == "sample":
            cu_seqlens = _boundaries(batch)
    if not isinstance(labels, torch.Tensor):
        raise DtypeError(f"labels must be a tensor, got {type(labels).__name__}", item="labels")
    if cu_seqlens is None and normalization == "sample":
        raise SettingError(
            "normalization='sample' needs the samples' boundaries: pass cu_seqlens (or the whole batch as labels)",
            item="cu_seqlens",
        )
    z = logits.reshape(-1, logits.shape[-1])
    y = labels.reshape(-1).to(z.device)
    if y.shape[0] != z.shape[0]:
        raise DtypeError(f"labels has {y.shape[0]} positions but logits has {z.shape[0]}", item="labels")
    per = F.cross_entropy(z[:-1], y[1:], ignore_index=ignore_index, reduction="none")
    if normalization == "token" or per.numel() == 0:
        return per.sum()
    # The sample of each shifted position t (label t, t >= 1) and its loss-token count.
    cu = cu_seqlens.to(device=z.device, dtype=torch.int64)
    t = torch.arange(1, y.shape[0], device=z.device)
    sample = torch.searchsorted(cu[1:], t, right=True)
    carries = (y[1:] != ignore_index).to(per.dtype)
    counts = torch.zeros(cu.shape[0] - 1, dtype=per.dtype, device=z.device).index_add_(0, sample, carries)
    return (per * carries / counts[sample].clamp(min=1)).sum()


def _boundaries(batch: Mapping[str, Any]) -> torch.Tensor:
    """A packed batch's sample boundaries: its ``cu_seq_lens_q`` or ``cu_seqlens``, else from its ``position_ids``.

    Positions restart at every sample (``diff != 1``, transformers' own rule
    for packed rows); for multimodal RoPE (``(4, 1, T)``) row 0 holds them.
    """
    for k in ("cu_seq_lens_q", "cu_seqlens"):
        if batch.get(k) is not None:
            return batch[k]
    pos = batch.get("position_ids")
    if not isinstance(pos, torch.Tensor):
        raise InputError(
            "the batch has none of cu_seq_lens_q, cu_seqlens, position_ids: pass cu_seqlens", item="cu_seqlens"
        )
    if pos.dim() == 3:
        pos = pos[0]
    p = pos.reshape(-1).long()
    start = torch.ones(p.shape[0], dtype=torch.bool, device=p.device)
    start[1:] = (p[1:] - p[:-1]) != 1
    return torch.cat([torch.nonzero(start).flatten(), torch.tensor([p.shape[0]], device=p.device)])


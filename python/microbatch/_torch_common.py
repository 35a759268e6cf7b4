"""What the torch side of the package shares: :mod:`microbatch.torch`, its streaming
(``_stream``) and timing (``_timing``) parts and :mod:`microbatch.hf` import these
helpers from here, and this module imports none of them, so the package's imports
form no cycle (``tests/test_imports.py`` checks it).

- :func:`unwrap`: the model inside DDP, DataParallel, FSDP and ``torch.compile``
  wrappers (one rule for every caller).
- :func:`as_tensor`, :func:`tokens`: a sample's values as tensors, torch's
  conversion errors as a :class:`~microbatch.errors.DtypeError` naming the key.
- :func:`packed_layout`: ``cu_seqlens`` and positions of a packed row.
- :func:`loss_token_count`: the loss tokens of one sample's labels.
- :class:`PlanMismatchError` (public in :mod:`microbatch.torch`), which the sampler
  and the stream raise.
- :func:`planner_for`: the planner of a sampler or a stream, built from
  ``model=``/``seq_len=`` or given, and checked against the world size.
"""

from __future__ import annotations

import inspect
from typing import Any, List, Mapping, Optional, Sequence, Tuple

import torch

from .errors import DtypeError, Error, SettingError
from .plan import Planner

#: The label value that carries no loss (PyTorch's and Hugging Face's ``ignore_index``).
IGNORE_INDEX = -100

#: The attributes under which a wrapper holds the module it wraps: DDP and DataParallel (``module``),
#: FSDP (``_fsdp_wrapped_module``; its ``module`` too), ``torch.compile`` (``_orig_mod``).
_WRAPPED = ("module", "_fsdp_wrapped_module", "_orig_mod")

#: The keyword arguments of :class:`microbatch.Planner` a sampler or a stream passes on (``planner_settings``).
PLANNER_SETTINGS: Tuple[str, ...] = tuple(
    name for name in inspect.signature(Planner.__init__).parameters if name not in ("self", "model", "ranks", "seq_len")
)


def unwrap(model: Any) -> Any:
    """The model inside DDP / DataParallel / FSDP / ``torch.compile`` wrappers (nested ones too, at most 8 deep).

    An object that wraps nothing is returned as it is; an attribute that holds no
    ``torch.nn.Module`` is not a wrapper's (an empty ``nn.Sequential`` is still one).

    >>> import torch
    >>> from microbatch._torch_common import unwrap
    >>> inner = torch.nn.Linear(2, 2)
    >>> unwrap(torch.nn.DataParallel(inner)) is inner, unwrap(inner) is inner
    (True, True)
    """
    for _ in range(8):
        for attr in _WRAPPED:
            inner = getattr(model, attr, None)
            if isinstance(inner, torch.nn.Module) and inner is not model:
                model = inner
                break
        else:
            break
    return model


def as_tensor(x: Any, what: str, item: Any) -> torch.Tensor:
    """``x`` as a tensor, detached (data, not parameters); torch's conversion errors become a
    :class:`DtypeError` naming ``what`` (its ``item``: ``item``).

    >>> from microbatch._torch_common import as_tensor
    >>> as_tensor([1, 2], "sample 0: labels", 0).tolist()
    [1, 2]
    >>> as_tensor([[1], [2, 3]], "sample 0: labels", 0)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    microbatch.errors.DtypeError: sample 0: labels cannot be converted to a tensor (list): ...
    """
    if isinstance(x, torch.Tensor):
        return x.detach()
    try:
        return torch.as_tensor(x)
    except (TypeError, ValueError, RuntimeError, OverflowError) as e:
        raise DtypeError(f"{what} cannot be converted to a tensor ({type(x).__name__}): {e}", item=item) from None


def tokens(x: Any, what: str, item: Any, *, integer: bool = True) -> torch.Tensor:
    """A per-token value of one sample as a 1-D tensor (``(L,)`` or ``(1, L)`` accepted); int64 when ``integer``.

    >>> from microbatch._torch_common import tokens
    >>> tokens([[5, 6, 7]], "sample 0: input_ids", 0).tolist()
    [5, 6, 7]
    """
    t = as_tensor(x, what, item)
    if t.dim() == 2 and t.shape[0] == 1:
        t = t[0]
    if t.dim() != 1:
        raise DtypeError(f"{what} must be 1-D (or (1, L)), got shape {tuple(t.shape)}", item=item)
    if integer:
        if t.numel() and (t.is_floating_point() or t.is_complex() or t.dtype == torch.bool):
            raise DtypeError(f"{what} must hold integers, got {t.dtype}", item=item)
        t = t.long()
    return t


def packed_layout(lengths: Sequence[int]) -> Tuple[torch.Tensor, torch.Tensor]:
    """The packed row of documents of ``lengths``: ``cu_seqlens`` ``(n + 1,)`` int32 and positions
    ``(T,)`` int64 restarting at 0 per document.

    >>> from microbatch._torch_common import packed_layout
    >>> cu, positions = packed_layout([3, 2])
    >>> cu.tolist(), positions.tolist()
    ([0, 3, 5], [0, 1, 2, 0, 1])
    """
    sizes = torch.tensor(list(lengths), dtype=torch.int64)
    cu = torch.zeros(sizes.shape[0] + 1, dtype=torch.int32)
    if sizes.shape[0]:
        cu[1:] = torch.cumsum(sizes, 0)
    starts = torch.repeat_interleave(cu[:-1].long(), sizes)
    return cu, torch.arange(int(cu[-1]), dtype=torch.int64) - starts


def loss_token_count(labels: Any, ignore_index: int = IGNORE_INDEX) -> int:
    """The positions ``t >= 1`` of one sample's 1-D ``labels`` that are not ``ignore_index``
    (:func:`microbatch.torch.loss_tokens`, which documents why).

    >>> from microbatch._torch_common import loss_token_count
    >>> loss_token_count([-100, 7, 8])
    2
    """
    t = torch.as_tensor(labels)
    if t.dim() != 1:
        raise DtypeError(f"labels must be 1-D (one sample), got shape {tuple(t.shape)}", item="labels")
    return int((t[1:] != ignore_index).sum())


def planner_for(
    planner: Any,
    model: Any,
    seq_len: Optional[int],
    settings: Mapping[str, Any],
    *,
    ranks: int,
    ranks_are: str,
) -> Any:
    """The planner of a sampler or a stream over ``ranks`` ranks: ``planner`` when given (then
    ``model``, ``seq_len`` and ``settings`` must not be), else ``Planner(model, ranks, seq_len,
    **settings)``. A given planner for another number of ranks is a :class:`SettingError` that says
    ``"the planner plans for N ranks but {ranks_are} {ranks}"`` (``ranks_are``: where the caller's
    number comes from, e.g. ``"num_replicas is"``).

    >>> from microbatch._torch_common import planner_for
    >>> planner_for(None, "qwen2.5-vl-7b", 1024, {}, ranks=2, ranks_are="num_replicas is").ranks
    2
    """
    if planner is None:
        if model is None or seq_len is None:
            raise SettingError(
                "give either planner= (a microbatch.Planner) or model= and seq_len= to build one",
                item="model" if model is None else "seq_len",
            )
        return Planner(model, ranks, seq_len, **settings)
    if model is not None or seq_len is not None or settings:
        names = [n for n, v in (("model", model), ("seq_len", seq_len)) if v is not None] + sorted(settings)
        raise SettingError(
            f"planner= is given, so the planner settings {names} would be ignored: set them on the planner",
            item=names[0],
        )
    if getattr(planner, "ranks", None) != ranks:
        raise SettingError(
            f"the planner plans for {getattr(planner, 'ranks', None)} ranks but {ranks_are} {ranks}: "
            "build the planner with ranks equal to the world size",
            item="planner",
        )
    return planner


class PlanMismatchError(Error):
    """Ranks planned different steps: their plans' fingerprints differ.

    Raised on every rank by :meth:`BalancedBatchSampler.verify` and
    :func:`verify_plans`; :attr:`ranks` lists the ranks whose fingerprints
    differ from rank 0's, :attr:`Error.item` is the first of them.
    Every rank must build its sampler from the same metadata, global batch
    size, seed, epoch and planner settings. :attr:`Error.kind` is
    ``"PlanMismatch"``, or ``"PlanFailed"`` when some ranks failed to plan a
    step that the others planned (``verify=True``): :attr:`ranks` are then the
    failed ranks and the message the first one's error. When the comparison's
    own collective fails, the plans cannot be compared: the kind is
    ``"Timeout"`` (it waited the process group's timeout: another rank hung or
    did not reach it) or ``"Communication"`` (it failed otherwise, usually at
    once: the connection to a rank whose process ended closed), raised on the
    ranks that see it, :attr:`ranks` is that rank, the message says what
    happened and after how many seconds, and the backend's exception is the
    ``__cause__``; the process group must not be used any more.

    >>> e = PlanMismatchError("ranks differ", ranks=[1, 3])
    >>> e.item, e.ranks, isinstance(e, Error)
    (1, [1, 3], True)
    """

    def __init__(self, message: str, *, ranks: Sequence[int] = (), kind: str = "PlanMismatch", item: Any = None) -> None:
        ranks = [int(r) for r in ranks]
        super().__init__(message, kind=kind, item=ranks[0] if item is None and ranks else item)
        self.ranks: List[int] = ranks

    def __reduce__(self):
        return (_rebuild_mismatch, (str(self), self.ranks, self.kind, self.item))


def _rebuild_mismatch(message: str, ranks: List[int], kind: str, item: Any) -> PlanMismatchError:
    return PlanMismatchError(message, ranks=ranks, kind=kind, item=item)

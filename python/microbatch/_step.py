"""What a step of :mod:`microbatch.torch` (the sampler's :class:`~microbatch.torch.Step`, the
stream's :class:`~microbatch.torch.StreamStep`) reads from its plan as seen from one rank, and the
status round both use so that a failure on one rank is raised on every rank (never a hang)."""

from typing import Any, Callable, List, Optional, Sequence, Tuple

import numpy as np
import torch

from .plan import Plan

#: The bytes of a rank's message in a status round (utf-8, zero-padded; longer messages are cut).
STATUS_TEXT = 1024
_OK, _FAILED = 0, 1


class PlanView:
    """The members a training loop reads from one step's plan on one rank.

    Subclasses hold ``plan`` (the step's whole plan, every rank's micro-batches)
    and ``rank`` (the rank the record is for).
    """

    plan: Plan
    rank: int

    @property
    def micro_steps(self) -> int:
        """The micro-steps of this step (the same on every rank)."""
        return self.plan.micro_steps

    @property
    def fingerprint(self) -> int:
        """The plan's fingerprint (equal on every rank that planned the same step)."""
        return self.plan.fingerprint

    @property
    def samples(self) -> int:
        """The samples of the whole step (all ranks)."""
        return len(self.plan)

    def loss_scale(self, normalization: str, reduction: str) -> float:
        """The factor each micro-batch's summed loss is multiplied by: see :meth:`microbatch.Plan.loss_scale`."""
        return self.plan.loss_scale(normalization, reduction)

    def micro_batch(self, micro_step: int) -> List[int]:
        """The sample ids (the sampler's dataset indices) of this rank's micro-batch ``micro_step`` (possibly none)."""
        return self.plan.micro_batch(self.rank, micro_step).tolist()


def group_device(group: Any) -> torch.device:
    """Where a collective of ``group`` takes its tensors: this rank's current CUDA device under NCCL
    (which communicates from device memory only), the CPU under gloo and the other backends."""
    import torch.distributed as dist

    if "nccl" in str(dist.get_backend(group)).lower():
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def failure_text(error: BaseException, prefix: str = "") -> str:
    """What a status round tells the other ranks about ``error``: ``prefix``, its class and message."""
    return f"{prefix}{type(error).__name__}: {error}"


def status_round(
    gather: Callable[[torch.Tensor], List[torch.Tensor]],
    words: Sequence[int],
    error: Optional[BaseException],
    message: str = "",
) -> Tuple[np.ndarray, List[int], List[str]]:
    """One ``all_gather`` of every rank's status: ``[ok or failed, *words]`` and a message.

    ``gather`` all-gathers one CPU ``int64`` tensor (the same length on every
    rank: ``len(words)`` must be too) and returns every rank's copy on the CPU;
    it is the caller's, so that it moves the tensor to the group's device and
    applies its own timeout. ``error`` is this rank's failure (``None``: none);
    ``message`` what the other ranks are told about it (default: its class and
    message), or, without an error, text for them (new key names, ...).
    Returns ``(rows, failed, texts)``: every rank's ``words`` (an
    ``(R, len(words))`` ``int64`` array), the ranks that failed and every
    rank's message. Raise with :func:`raise_failed`, so that every rank raises
    the same error. O(R * (len(words) + STATUS_TEXT)) bytes on the wire.
    """
    if error is not None and not message:
        message = failure_text(error)
    data = message.encode()[:STATUS_TEXT]
    data = data.decode(errors="ignore").encode().ljust(STATUS_TEXT, b"\0")  # a cut never splits a character
    head = np.array([_FAILED if error is not None else _OK, *words], dtype=np.int64)
    mine = torch.from_numpy(np.concatenate([head, np.frombuffer(data, dtype=np.int64)]))
    rows = torch.stack(gather(mine)).numpy()
    n = head.shape[0]
    failed = [r for r in range(rows.shape[0]) if rows[r, 0] != _OK]
    texts = [rows[r, n:].tobytes().rstrip(b"\0").decode(errors="replace") for r in range(rows.shape[0])]
    return rows[:, 1:n], failed, texts


def raise_failed(
    failed: Sequence[int],
    texts: Sequence[str],
    error: Optional[BaseException],
    make: Callable[[str, List[int]], BaseException],
    *,
    own_if_all: bool,
) -> None:
    """After :func:`status_round`: raises on every rank when any rank failed, else returns.

    Every rank raises ``make(text, failed)`` (``text``: the first failed
    rank's message), chained to this rank's own ``error`` where it has one.
    With ``own_if_all``, when every rank failed with the same message (every
    rank planned the same step and the planner refused it alike), each raises
    its own ``error`` instead: the same class and message everywhere, e.g. an
    :class:`~microbatch.OversizeError` that names the sample.
    """
    if not failed:
        return
    if own_if_all and error is not None and len(failed) == len(texts) and len(set(texts)) == 1:
        raise error
    raise make(texts[failed[0]], list(failed)) from error

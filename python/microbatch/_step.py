"""What a step of :mod:`microbatch.torch` (the sampler's :class:`~microbatch.torch.Step`, the
stream's :class:`~microbatch.torch.StreamStep`) reads from its plan as seen from one rank, the
status round both use so that a failure on one rank is raised on every rank (never a hang), the
settings round that agrees, in a collective of one size whatever the settings, on every setting
that shapes the later collectives, and the words that say what happened to a collective that
failed (a closed connection, a timeout) and after how long."""

import datetime
import re
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

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


# --- the settings round --------------------------------------------------------

#: The words of a rank's settings in a settings round, whatever the settings: the round's size never
#: depends on them (nor on the package's version: word 0 is the protocol of what follows), so ranks
#: whose settings differ meet in it and every one of them raises, where a collective whose size
#: depends on a setting would abort a process (gloo: "op.preamble.length <= op.nbytes").
SETTINGS_WORDS = 16
#: The characters of one setting's shown value in a settings round's message (longer ones are cut).
SETTING_SHOWN = 200


def settings_round(
    gather: Callable[[torch.Tensor], List[torch.Tensor]],
    settings: Sequence[Tuple[str, int, str]],
    error: Optional[BaseException] = None,
    message: str = "",
) -> Tuple[List[int], List[str], List[Tuple[str, List[Tuple[str, List[int]]]]]]:
    """One fixed-size :func:`status_round` in which the ranks compare their settings.

    ``settings``: ``(name, word, shown)`` per setting, at most
    :data:`SETTINGS_WORDS` (the same names in the same order on every rank;
    the first is the protocol of the collectives that follow): ``word`` is
    the setting as an ``int64`` (its value, or a stable digest of it, see
    :func:`stable_digest`) and ``shown`` the value as the error shows it
    (cut to :data:`SETTING_SHOWN` characters; the names and shown values
    travel in the round's message, so their total beyond 1 KiB is cut too).
    ``error``/``message``: this rank's failure, as for :func:`status_round`.
    Returns ``(failed, texts, differences)``: the ranks that failed and every
    rank's message (raise with :func:`raise_failed` first), then each
    setting whose word differs between ranks as ``(name, [(shown, ranks), ...])``,
    the values in the order of the first rank holding each. Raise the
    differences with :func:`differences_text`.

    >>> sent = {}
    >>> def capture(t):  # what a rank with these settings sends: a one-rank round
    ...     sent["t"] = t
    ...     return [t]
    >>> _ = settings_round(capture, [("protocol", 1, "1"), ("samples_per_rank", 5, "5")])
    >>> failed, texts, diff = settings_round(lambda t: [t, sent["t"]],  # rank 0 with 6, rank 1 with 5
    ...                                      [("protocol", 1, "1"), ("samples_per_rank", 6, "6")])
    >>> failed, diff
    ([], [('samples_per_rank', [('6', [0]), ('5', [1])])])
    >>> differences_text(diff)
    'samples_per_rank is 6 on rank 0 and 5 on rank 1'
    """
    if len(settings) > SETTINGS_WORDS:
        raise ValueError(f"{len(settings)} settings, at most {SETTINGS_WORDS} fit a settings round")
    words = [int(w) for _, w, _ in settings] + [0] * (SETTINGS_WORDS - len(settings))
    if error is None and not message:
        message = "\n".join(f"{name}={shown[:SETTING_SHOWN]}" for name, _, shown in settings)
    rows, failed, texts = status_round(gather, words, error, message)
    differences: List[Tuple[str, List[Tuple[str, List[int]]]]] = []
    if failed:
        return failed, texts, differences
    for i, (name, _, _) in enumerate(settings):
        column = rows[:, i].tolist()
        if len(set(column)) == 1:
            continue
        groups: Dict[int, List[int]] = {}
        for r, w in enumerate(column):
            groups.setdefault(w, []).append(r)
        values = [(_shown(texts[ranks[0]], name, column[ranks[0]]), ranks) for ranks in groups.values()]
        differences.append((name, values))
    return failed, texts, differences


def _shown(text: str, name: str, word: int) -> str:
    """The value of setting ``name`` in a rank's settings-round message; its word where the message was cut."""
    prefix = name + "="
    for line in text.split("\n"):
        if line.startswith(prefix):
            return line[len(prefix):]
    return f"<{word:#x}>"


def _ranks_text(ranks: Sequence[int]) -> str:
    if len(ranks) == 1:
        return f"rank {ranks[0]}"
    return "ranks " + ", ".join(map(str, ranks[:-1])) + f" and {ranks[-1]}"


def differences_text(differences: Sequence[Tuple[str, Sequence[Tuple[str, Sequence[int]]]]]) -> str:
    """The settings that differ, as :func:`settings_round` returns them, in words: ``"samples_per_rank is
    6 on ranks 0 and 2 and 5 on rank 1; uneven is ..."``."""
    parts = []
    for name, values in differences:
        parts.append(f"{name} is " + " and ".join(f"{shown} on {_ranks_text(ranks)}" for shown, ranks in values))
    return "; ".join(parts)


def stable_digest(text: str) -> int:
    """A 63-bit digest of ``text``, the same in every process (Python's ``hash`` is salted per process)."""
    import hashlib

    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little") >> 1


# --- a collective that failed --------------------------------------------------

# What torch's backends say when a peer's connection went away (gloo: "Connection closed by peer",
# "Read error ...: Connection reset by peer", a write's "Broken pipe"; NCCL: "remote process exited").
_PEER_GONE = re.compile(
    r"closed by peer|reset by peer|broken pipe|connection refused|connection closed|end of file|\beof\b|"
    r"remote process exited|socket closed|peer (?:has )?(?:closed|disconnected)",
    re.IGNORECASE,
)
_TIMED_OUT = re.compile(r"timed out|timeout", re.IGNORECASE)


def collective_failure(
    error: BaseException,
    *,
    rank: int,
    what: str,
    waited: float,
    timeout: Optional[float],
) -> Tuple[str, str]:
    """``(kind, text)``: what happened to rank ``rank``'s collective ``what`` that raised ``error`` after
    ``waited`` seconds (``timeout``: the wait's limit in seconds; ``None``: the process group's own).

    ``kind`` is ``"Timeout"`` when the backend says the wait timed out,
    ``"Communication"`` otherwise; the text says which (a timeout, a peer's
    connection that closed, another failure), how long this rank actually
    waited, and the backend's own words (first line, cut to 300 characters).

    >>> kind, text = collective_failure(RuntimeError("Read error [127.0.0.1]:5: Connection reset by peer"),
    ...                                 rank=0, what="status round", waited=0.12, timeout=10.0)
    >>> kind
    'Communication'
    >>> print(text)  # doctest: +NORMALIZE_WHITESPACE
    rank 0's status round failed after 0.12 s (its timeout is 10 s): the connection to another rank
    closed (that rank's process ended: killed, crashed or exited while this rank still waited for it)
    (RuntimeError: Read error [127.0.0.1]:5: Connection reset by peer)
    >>> collective_failure(RuntimeError("Operation timed out!"), rank=1, what="exchange", waited=10.0,
    ...                    timeout=10.0)[1][:80]
    'rank 1 timed out in the exchange after waiting 10 s (its timeout is 10 s): anoth'
    """
    said = str(error).strip().split("\n", 1)[0]
    if len(said) > 300:
        said = said[:300] + "..."
    own = f"({type(error).__name__}: {said})"
    limit = "the process group's timeout" if timeout is None else f"{timeout:g} s"
    if _TIMED_OUT.search(said):
        return "Timeout", (
            f"rank {rank} timed out in the {what} after waiting {_seconds(waited)} (its timeout is {limit}): "
            "another rank did not take part in time (it hung, stopped iterating or failed outside the stream, "
            "is slower than the timeout, or itself failed in this collective, e.g. because a rank it exchanges "
            f"with died) {own}"
        )
    if _PEER_GONE.search(said):
        return "Communication", (
            f"rank {rank}'s {what} failed after {_seconds(waited)} (its timeout is {limit}): the connection to "
            "another rank closed (that rank's process ended: killed, crashed or exited while this rank still "
            f"waited for it) {own}"
        )
    return "Communication", f"rank {rank}'s {what} failed after {_seconds(waited)} (its timeout is {limit}) {own}"


def _seconds(s: float) -> str:
    return f"{s:.2g} s" if s < 10 else f"{s:.0f} s"


def wait_collective(
    start: Callable[[], Any],
    *,
    timeout: Optional[datetime.timedelta],
    fail: Callable[[str, str, float], BaseException],
    rank: int,
    what: str,
) -> float:
    """Starts a collective (``start()``: one ``async_op=True`` call, returning its work, or ``None``
    for a synchronous call) and waits for it, at most ``timeout`` (``None``: the process group's).
    Returns the seconds it took; when starting or waiting raises (a timeout, a closed connection),
    raises ``fail(kind, text, waited)`` from it, with ``kind`` and ``text`` from :func:`collective_failure`."""
    t0 = time.monotonic()
    try:
        work = start()
        if work is not None:
            if timeout is None:
                work.wait()
            else:
                work.wait(timeout=timeout)
    except RuntimeError as e:  # torch.distributed's DistError, DistBackendError, ... are RuntimeErrors
        waited = time.monotonic() - t0
        limit = None if timeout is None else timeout.total_seconds()
        kind, text = collective_failure(e, rank=rank, what=what, waited=waited, timeout=limit)
        raise fail(kind, text, waited) from e
    return time.monotonic() - t0

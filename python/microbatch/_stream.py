"""The streaming path of :mod:`microbatch.torch`: per-rank loaders balanced step by step.

Its public names are re-exported by :mod:`microbatch.torch`; import them from there.

Every rank reads its own stream of samples (an ``IterableDataset``, a
WebDataset-style shard reader, any iterable of dicts of tensors). For every
optimizer step :class:`BalancedStream`

1. takes ``samples_per_rank`` samples from this rank's stream (reading one step
   ahead, so that the last samples of an epoch can join the step before);
2. gathers every rank's status and sample counts (one ``all_gather`` of a
   fixed-size ``int64`` header), then every sample's metadata (one
   ``all_gather`` of ``int64`` rows padded to the largest rank's): no pickled
   objects;
3. plans the step with :meth:`microbatch.Planner.plan` on every rank from the
   same gathered metadata, with each sample's origin (the rank that read it)
   and its bytes (its serialized size), so that ``locality=`` keeps samples
   home; the ranks compare their plans' fingerprints (one more ``all_gather``);
4. ships the samples that change rank with one
   ``torch.distributed.all_to_all_single`` of ``uint8`` buffers (the sizes are
   known to every rank from the gathered metadata) and yields this rank's
   micro-batches in plan order, with the step's loss scales.

A failure on any rank (its loader raises, a sample cannot be shipped, the
planner settings differ, a stream ends early under ``uneven="error"``) is
reported to every rank at the step's next collective, and every rank raises
the same :class:`StreamError` (or :class:`PlanMismatchError`): no rank is
left waiting in a collective. See :class:`BalancedStream` for the epoch-end
policy and the timeout.
"""

from __future__ import annotations

import dataclasses
import datetime
import hashlib
import operator
import struct
import time
from typing import Any, Callable, Dict, Iterable, Iterator, List, Mapping, Optional, Sequence, Tuple

import numpy as np
import torch

from . import _arrays
from ._step import PlanView
from .errors import DtypeError, Error, InputError, InternalError, SettingError
from .plan import Plan, Planner

__all__ = ["BalancedStream", "StreamStep", "StreamError", "UNEVEN_POLICIES", "sample_bytes"]

#: What :class:`BalancedStream` does when the ranks' streams end at different steps.
UNEVEN_POLICIES = ("drain", "error")

# --- the wire format -----------------------------------------------------------
#
# A sample is a record of int64 words and raw bytes, every part a multiple of 8
# bytes long so that every tensor's data starts 8-byte aligned in the buffer:
#
#   [id, tensors]                                   2 words
#   per tensor: [key index, dtype code, ndim, *shape] 3 + ndim words
#               its bytes, zero-padded to a multiple of 8
#
# The key index points into the stream's key table, which the ranks agree on
# in the header round (every new key name travels once).

_DTYPES: Tuple[torch.dtype, ...] = tuple(
    d
    for d in (
        getattr(torch, name, None)
        for name in (
            "bool", "uint8", "int8", "int16", "int32", "int64", "float16", "bfloat16", "float32",
            "float64", "complex64", "complex128", "uint16", "uint32", "uint64",
            "float8_e4m3fn", "float8_e5m2",
        )
    )
    if isinstance(d, torch.dtype)
)
_DTYPE_CODE: Dict[torch.dtype, int] = {d: i for i, d in enumerate(_DTYPES)}

_HEAD_WORDS = 8  # status, step, new samples, ended, settings hash, key-table size, new images, spare
_TEXT_BYTES = 1024  # an error message or this round's new key names, utf-8, zero-padded
_OK, _FAILED = 0, 1


def _pad8(n: int) -> int:
    return (n + 7) & ~7


def _as_sample(sample: Any, where: str) -> Dict[str, torch.Tensor]:
    """A sample as a dict of CPU-or-device tensors (numpy arrays converted); anything else raises naming the key."""
    if not isinstance(sample, Mapping):
        raise InputError(
            f"{where} is a {type(sample).__name__}: the stream ships dicts of tensors "
            "(e.g. {'input_ids': tensor, 'pixel_values': tensor})",
            item=where,
        )
    out: Dict[str, torch.Tensor] = {}
    for k, v in sample.items():
        if not isinstance(k, str) or not k or "\n" in k or "\0" in k:
            raise InputError(
                f"{where} has the key {k!r}: keys must be non-empty strings without newlines or NUL", item=where
            )
        if isinstance(v, np.ndarray):
            if v.dtype == object:
                raise DtypeError(f"{where}: {k!r} is a numpy array of objects: ship numbers only", item=k)
            v = torch.from_numpy(np.ascontiguousarray(v))
        if not isinstance(v, torch.Tensor):
            raise DtypeError(
                f"{where}: {k!r} is a {type(v).__name__}, not a tensor: the stream ships tensors only "
                "(encode it as one, e.g. torch.tensor(value))",
                item=k,
            )
        if v.dtype not in _DTYPE_CODE:
            raise DtypeError(f"{where}: {k!r} has dtype {v.dtype}, which the stream cannot ship", item=k)
        if v.is_sparse or v.layout != torch.strided:
            raise DtypeError(f"{where}: {k!r} is a {v.layout} tensor: ship dense tensors", item=k)
        out[k] = v.detach()
    return out


def sample_bytes(sample: Mapping[str, Any]) -> int:
    """The bytes a sample takes on the wire in :class:`BalancedStream`'s exchange.

    16 bytes of record header, then per tensor ``8 * (3 + ndim)`` bytes of
    header (key index, dtype code, ndim, shape) and its data rounded up to a
    multiple of 8. This is what the planner is given as the sample's
    ``bytes``, so :attr:`microbatch.Plan.exchange` and the report's
    ``bytes_moved`` count exactly what the all-to-all sends.

    >>> import torch
    >>> from microbatch.torch import sample_bytes
    >>> sample_bytes({"input_ids": torch.zeros(5, dtype=torch.int64)})  # 16 + 32 + 40
    88
    >>> sample_bytes({"pixel_values": torch.zeros(2, 3, dtype=torch.float16)})  # 16 + 40 + 16
    72
    """
    s = _as_sample(sample, "the sample")
    return 16 + sum(8 * (3 + t.dim()) + _pad8(t.numel() * t.element_size()) for t in s.values())


# numpy's dtype for each dtype code (None: no numpy equivalent, go through torch) and the element sizes.
_NUMPY: Tuple[Optional[np.dtype], ...] = tuple(
    None if d in (torch.bfloat16,) or str(d).startswith("torch.float8") or str(d).startswith("torch.uint") and d != torch.uint8
    else np.dtype(torch.empty((), dtype=d).numpy().dtype)
    for d in _DTYPES
)
_SIZES: Tuple[int, ...] = tuple(torch.empty((), dtype=d).element_size() for d in _DTYPES)


def _bytes_of(t: torch.Tensor) -> np.ndarray:
    """A tensor's data as a flat ``uint8`` numpy array (a view when it is a contiguous CPU tensor)."""
    t = t.detach()
    if t.device.type != "cpu":
        t = t.cpu()
    if _NUMPY[_DTYPE_CODE[t.dtype]] is not None:
        return np.ascontiguousarray(t.numpy()).reshape(-1).view(np.uint8)
    return t.contiguous().reshape(-1).view(torch.uint8).numpy()


def _encode(records: Sequence[Tuple[int, Dict[str, torch.Tensor]]], keys: Dict[str, int], size: int) -> torch.Tensor:
    """The records as one CPU ``uint8`` buffer of exactly ``size`` bytes (numpy copies: no intra-op threads).

    O(size) time, one copy of every tensor; about 2 small numpy calls per tensor.
    """
    buf = np.zeros(size, dtype=np.uint8)  # the padding stays 0
    raw = buf.data
    off = 0
    for sid, sample in records:
        struct.pack_into("<2q", raw, off, sid, len(sample))
        off += 16
        for k, t in sample.items():
            shape = t.shape
            struct.pack_into(f"<{3 + len(shape)}q", raw, off, keys[k], _DTYPE_CODE[t.dtype], len(shape), *shape)
            off += 24 + 8 * len(shape)
            nbytes = t.numel() * _SIZES[_DTYPE_CODE[t.dtype]]
            if nbytes:
                buf[off : off + nbytes] = _bytes_of(t)
            off += _pad8(nbytes)
    if off != size:
        raise InternalError(f"the exchange encoded {off} bytes where the plan counted {size}")
    return torch.from_numpy(buf)


def _decode(buf: np.ndarray, expected: Sequence[int], table: Sequence[str], src: int) -> Dict[int, Dict[str, torch.Tensor]]:
    """The records of ``buf`` (``uint8``, from rank ``src``), which must be the samples ``expected`` in order.

    O(len(buf)) time: every tensor is copied out once (it owns its memory, aligned for any dtype).
    """
    out: Dict[int, Dict[str, torch.Tensor]] = {}
    off = 0
    total = buf.shape[0]
    raw = np.ascontiguousarray(buf).data
    try:
        for want in expected:
            sid, count = struct.unpack_from("<2q", raw, off)
            off += 16
            if sid != want:
                raise InternalError(f"rank {src} sent sample {sid} where the plan expects {want}")
            sample: Dict[str, torch.Tensor] = {}
            for _ in range(count):
                key, code, ndim = struct.unpack_from("<3q", raw, off)
                shape = struct.unpack_from(f"<{ndim}q", raw, off + 24)
                off += 24 + 8 * ndim
                numel = 1
                for d in shape:
                    numel *= d
                n = numel * _SIZES[code]
                if off + n > total:
                    raise InternalError(f"rank {src} sent {total} bytes, fewer than its samples' headers say")
                np_dtype = _NUMPY[code]
                if np_dtype is not None:
                    a = np.frombuffer(buf, dtype=np_dtype, count=numel, offset=off).reshape(shape).copy()
                    sample[table[key]] = torch.from_numpy(a)
                elif n:
                    data = torch.from_numpy(buf[off : off + n].copy())
                    sample[table[key]] = data.view(_DTYPES[code]).reshape(shape)
                else:
                    sample[table[key]] = torch.empty(shape, dtype=_DTYPES[code])
                off += _pad8(n)
            out[want] = sample
    except struct.error:
        raise InternalError(f"rank {src} sent {total} bytes, fewer than its samples' headers say") from None
    if off != total:
        raise InternalError(f"rank {src} sent {total} bytes where its samples take {off}")
    return out


# --- errors --------------------------------------------------------------------


class StreamError(Error, RuntimeError):
    """A failure of :class:`BalancedStream`, raised on every rank with the same message.

    Attributes:
        ranks: the ranks where it happened (a loader that raised, a stream that
            ended early, a rank that stopped answering); ``item`` is the first.
        step: the step at which the ranks found out (``None`` when not known).
        kind: ``"StreamFailed"`` (a rank's loader, its metadata callable or a
            sample failed; the original exception is the ``__cause__`` on that
            rank), ``"StreamEnded"`` (streams of different lengths with
            ``uneven="error"``), ``"Keys"`` (too many new key names for one
            step), ``"TooFewSamples"`` (fewer samples in all than ranks),
            ``"Timeout"`` (a collective waited longer than ``timeout``: the
            process group must not be used any more).

    >>> from microbatch.torch import StreamError
    >>> e = StreamError("rank 1's loader raised", ranks=[1], step=3, kind="StreamFailed")
    >>> e.item, e.ranks, e.step, isinstance(e, RuntimeError)
    (1, [1], 3, True)
    """

    def __init__(
        self,
        message: str,
        *,
        ranks: Sequence[int] = (),
        step: Optional[int] = None,
        kind: str = "StreamFailed",
        item: Any = None,
    ) -> None:
        ranks = [int(r) for r in ranks]
        super().__init__(message, kind=kind, item=ranks[0] if item is None and ranks else item)
        self.ranks: List[int] = ranks
        self.step = step

    def __reduce__(self):
        return (_rebuild_stream_error, (str(self), self.ranks, self.step, self.kind, self.item))


def _rebuild_stream_error(message: str, ranks: List[int], step: Optional[int], kind: str, item: Any) -> StreamError:
    return StreamError(message, ranks=ranks, step=step, kind=kind, item=item)


# --- the step ------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class StreamStep(PlanView):
    """One optimizer step of a :class:`BalancedStream`, as seen from one rank.

    Run forward and backward on every micro-batch in :attr:`batches` (an empty
    one too: every rank runs :attr:`micro_steps`), multiply each micro-batch's
    summed loss by :meth:`loss_scale`, step the optimizer after the last.

    Attributes:
        index: the step's position in this pass over the streams (0, 1, ...).
        rank: this rank.
        plan: the step's plan (every rank's micro-batches, by sample id).
        batches: this rank's micro-batches in plan order, each a list of
            sample dicts (ready for :func:`collate_packed` or
            :class:`microbatch.hf.PackedCollator`). A sample read on this rank
            holds the loader's own tensors (in a new dict; numpy arrays as
            tensors); a sample received from another rank holds new CPU
            tensors of the same dtypes, shapes and values.
        bytes_sent, bytes_received: the bytes this rank's all-to-all sent to
            and received from the other ranks (equal to the plan's
            ``exchange.bytes_out[rank]`` and ``bytes_in[rank]``).
        timings: seconds spent on this rank: ``"read"`` (the loader, since
            the step before), ``"gather"`` (the metadata all-gather),
            ``"plan"`` (the planner), ``"exchange"`` (everything after
            planning: ``"check"``, the fingerprint all-gather; ``"encode"``;
            ``"transfer"``, the all-to-all; ``"decode"``; and building
            :attr:`batches`).

    Sample ids are ``rank + ranks * k`` for the ``k``-th sample the stream of
    ``rank`` produced in this pass: :meth:`origin` inverts it.

    >>> import microbatch
    >>> from microbatch.torch import StreamStep
    >>> plan = microbatch.Planner("qwen2.5-vl-7b", ranks=2, seq_len=512).plan(
    ...     ids=[0, 1, 2, 3], text_tokens=[100, 200, 300, 50], loss_tokens=[10, 20, 30, 0])
    >>> step = StreamStep(index=0, rank=0, plan=plan, batches=[[]] * plan.micro_steps,
    ...                   bytes_sent=0, bytes_received=0, timings={})
    >>> step.loss_scale("token", "mean") == 2 / 60, step.origin(3)
    (True, (1, 1))
    """

    index: int
    rank: int
    plan: Plan
    batches: List[List[Dict[str, torch.Tensor]]]
    bytes_sent: int
    bytes_received: int
    timings: Dict[str, float]

    def origin(self, sample_id: int) -> Tuple[int, int]:
        """``(rank, k)``: the sample is the ``k``-th that rank ``rank``'s stream produced in this pass."""
        k, r = divmod(int(sample_id), self.plan.ranks)
        return r, k


# --- the stream ----------------------------------------------------------------

Metadata = Callable[[Mapping[str, Any]], Tuple[Any, ...]]


def _default_metadata(sample: Mapping[str, Any]) -> Tuple[int, Sequence[int], int]:
    """A text-only sample: its ``input_ids``' length, no image, the loss tokens of its ``labels`` (else of ``input_ids``)."""
    from .torch import loss_tokens

    if "input_ids" not in sample:
        raise InputError(
            "the sample has no 'input_ids': give BalancedStream a metadata= callable that returns "
            "(text_tokens, image_tokens[, loss_tokens]) for it",
            item="input_ids",
        )
    x = torch.as_tensor(sample["input_ids"]).reshape(-1)
    labels = sample.get("labels")
    y = x if labels is None else torch.as_tensor(labels).reshape(-1)
    return int(x.shape[0]), (), loss_tokens(y)


def _meta_row(meta: Metadata, sample: Mapping[str, Any]) -> Tuple[int, List[int], int]:
    row = meta(sample)
    if not isinstance(row, (tuple, list)) or len(row) not in (2, 3):
        raise DtypeError(
            f"the metadata callable returned {type(row).__name__}: return a tuple "
            "(text_tokens, image_tokens[, loss_tokens])",
            item="metadata",
        )
    try:
        text = operator.index(_item(row[0]))
        images = [] if row[1] is None else [operator.index(_item(v)) for v in _flat(row[1])]
        loss = text if len(row) == 2 or row[2] is None else operator.index(_item(row[2]))
    except TypeError:
        raise DtypeError(f"the metadata callable returned a non-integer token count: {row!r}", item="metadata") from None
    for name, v in (("text_tokens", text), ("loss_tokens", loss), *(("an image's tokens", x) for x in images)):
        if not 0 <= v < 2**32:
            raise DtypeError(f"the metadata callable returned {name} = {v}: counts must be in [0, 2**32)", item="metadata")
    return text, images, loss


def _item(v: Any) -> Any:
    return v.item() if isinstance(v, (torch.Tensor, np.ndarray, np.generic)) and np.ndim(v) == 0 else v


def _flat(v: Any) -> List[Any]:
    if isinstance(v, torch.Tensor):
        return v.reshape(-1).tolist()
    if isinstance(v, np.ndarray):
        return v.reshape(-1).tolist()
    return list(v)


def _stable_hash(text: str) -> int:
    """A 63-bit hash of ``text``, the same in every process (Python's ``hash`` is salted per process)."""
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little") >> 1


@dataclasses.dataclass
class _Local:
    """A sample read on this rank: its id, tensors, metadata and wire size."""

    id: int
    sample: Dict[str, torch.Tensor]
    text: int
    images: List[int]
    loss: int
    bytes: int


class BalancedStream:
    """Balances per-rank streams of samples: every step gathered, planned with origins, exchanged, yielded.

    For training from loaders that each rank reads on its own (an
    ``IterableDataset`` per rank, WebDataset shards), where no rank knows the
    other ranks' samples in advance: iterate it on every rank of the process
    group, in step. Each item is a :class:`StreamStep` holding this rank's
    micro-batches (lists of sample dicts) and the step's loss scales.

    Args:
        samples: this rank's samples, an iterable of dicts of tensors (numpy
            arrays are converted): an ``IterableDataset``, a ``DataLoader``
            with ``batch_size=None``, a generator. Every value is shipped as
            it is (any shape and dtype, dense); keys may differ between
            samples (a text-only sample without ``pixel_values``).
            ``iter(samples)`` is called once per pass (epoch).
        samples_per_rank: the samples each rank reads per step (the global
            batch is ``ranks * samples_per_rank``, less at the end of an epoch).
        metadata: ``metadata(sample) -> (text_tokens, image_tokens[, loss_tokens])``,
            called with each sample as the loader yielded it: the sample's text tokens (the model input's tokens other than
            image tokens), its images' token counts (a list, empty for none)
            and its loss tokens (see :func:`loss_tokens`; omitted: all its text
            tokens). ``None``: a text-only sample's ``input_ids`` length and
            the loss tokens of its ``labels`` (of its ``input_ids`` without).
        planner: a :class:`microbatch.Planner` for the world size (its
            ``locality=`` keeps samples on the rank that read them); ``None``:
            one is built from ``model``, ``seq_len`` and ``planner_settings``.
        model, seq_len, planner_settings: the planner's settings, as for
            :class:`microbatch.Planner` (``sync``, ``locality``,
            ``ranks_per_node``, ``micro_steps``, ...).
        uneven: what happens when the streams end at different steps:

            - ``"drain"`` (the default): the epoch goes on until every stream
              has ended; a rank whose stream has ended reads nothing but still
              trains on samples the plan sends it, so every sample is trained
              exactly once. A step holds every sample read for it; when a step
              would hold fewer samples than ranks (the tail of the epoch), the
              next step's samples join it (the stream reads one step ahead for
              this), so only an epoch with fewer samples than ranks in all
              fails (``StreamError``, kind ``"TooFewSamples"``).
            - ``"error"``: every stream must produce the same number of samples;
              in the status round where one falls short, every rank raises
              :class:`StreamError` (kind ``"StreamEnded"``) naming the short
              ranks (the round reads one step ahead: the step before the short
              one is not yielded either).
        group: the process group (``None``: the default group).
        device: where the communication buffers live: ``None`` picks
            ``cuda`` (the current device) for NCCL and the CPU otherwise.
        timeout: seconds any one collective of the stream may wait for the
            other ranks before this rank raises :class:`StreamError` (kind
            ``"Timeout"``); ``None``: the process group's own timeout
            (``init_process_group(timeout=...)``; 30 minutes for gloo by default).

    Faults and the timeout: a failure inside the stream on any rank (its
    loader raises, its metadata callable raises, a sample holds something
    that is not a tensor, the planner settings or the plans differ, a stream
    ends early under ``"error"``) is sent to every rank in the step's status
    round, and every rank raises the same error there: :class:`StreamError`,
    or :class:`PlanMismatchError` for settings or plans that differ. No rank
    waits longer than the slowest rank takes to reach that round. A rank that
    stops without raising inside the stream (killed, hung, or failed in the
    training loop between steps) leaves the others waiting in a collective
    until ``timeout``; so does a rank that stops iterating while the others go
    on (stop every rank at the same step). No sample is dropped or trained
    twice: a step is either yielded on every rank or raises on every rank.

    Per step: three ``all_gather`` (a header of 8 words + 1 KiB per rank, the
    metadata of 5 words a sample + 1 word an image, the fingerprints) and one
    ``all_to_all_single`` carrying the moved samples' bytes; planning is the
    planner's (every rank plans the whole step); encoding and decoding are
    O(the moved bytes), one copy each. Memory: two steps' samples
    on this rank (the one being trained and the one read ahead) plus the
    received ones.

    Raises:
        SettingError: a planner for another number of ranks, an unknown
            ``uneven`` policy or planner setting, a process group that is not
            initialized.
        StreamError, PlanMismatchError: during iteration, on every rank (see above).

    Example (one process, one rank; under ``torchrun`` the same code runs on
    every rank, each with its own shard):

    >>> import torch, torch.distributed as dist
    >>> from microbatch.torch import BalancedStream, collate_packed
    >>> dist.init_process_group("gloo", init_method="tcp://127.0.0.1:0", rank=0, world_size=1)
    >>> shard = [{"input_ids": torch.arange(1, 2 + n % 7)} for n in range(10)]
    >>> stream = BalancedStream(shard, samples_per_rank=4, model="qwen2.5-vl-7b", seq_len=64)
    >>> for step in stream:
    ...     scale = step.loss_scale("token", "mean")
    ...     batches = [collate_packed(samples) for samples in step.batches]
    ...     print(step.index, step.samples, step.micro_steps)
    0 4 1
    1 4 1
    2 2 1
    >>> dist.destroy_process_group()
    """

    def __init__(
        self,
        samples: Iterable[Mapping[str, Any]],
        *,
        samples_per_rank: int,
        metadata: Optional[Metadata] = None,
        planner: Optional[Planner] = None,
        model: Any = None,
        seq_len: Optional[int] = None,
        uneven: str = "drain",
        group: Any = None,
        device: Any = None,
        timeout: Optional[float] = None,
        **planner_settings: Any,
    ) -> None:
        import inspect

        import torch.distributed as dist

        if not (dist.is_available() and dist.is_initialized()):
            raise SettingError(
                "BalancedStream needs an initialized torch.distributed process group "
                "(dist.init_process_group; one process: world_size=1)",
                item="group",
            )
        self.samples = samples
        self.group = group
        self.ranks = dist.get_world_size(group)
        self.rank = dist.get_rank(group)
        self.samples_per_rank = _arrays.count(samples_per_rank, "samples_per_rank", minimum=1)
        if uneven not in UNEVEN_POLICIES:
            raise SettingError(
                f"unknown uneven policy {uneven!r}: use one of {', '.join(map(repr, UNEVEN_POLICIES))}", item="uneven"
            )
        self.uneven = uneven
        self.metadata: Metadata = _default_metadata if metadata is None else metadata
        if timeout is not None and not (isinstance(timeout, (int, float)) and not isinstance(timeout, bool) and timeout > 0):
            raise SettingError(f"timeout must be a positive number of seconds or None, got {timeout!r}", item="timeout")
        self.timeout = None if timeout is None else datetime.timedelta(seconds=float(timeout))
        if planner is None:
            if model is None or seq_len is None:
                raise SettingError(
                    "give either planner= (a microbatch.Planner) or model= and seq_len= to build one",
                    item="model" if model is None else "seq_len",
                )
            known = set(inspect.signature(Planner.__init__).parameters) - {"self", "model", "ranks", "seq_len"}
            unknown = sorted(set(planner_settings) - known)
            if unknown:
                raise SettingError(
                    f"unknown planner setting {unknown[0]!r}: use one of {', '.join(sorted(known))}", item=unknown[0]
                )
            planner = Planner(model, self.ranks, seq_len, **planner_settings)
        elif model is not None or seq_len is not None or planner_settings:
            names = [n for n, v in (("model", model), ("seq_len", seq_len)) if v is not None] + sorted(planner_settings)
            raise SettingError(
                f"planner= is given, so the planner settings {names} would be ignored: set them on the planner",
                item=names[0],
            )
        if getattr(planner, "ranks", None) != self.ranks:
            raise SettingError(
                f"the planner plans for {getattr(planner, 'ranks', None)} ranks but the process group has "
                f"{self.ranks}: build the planner with ranks equal to the world size",
                item="planner",
            )
        self.planner = planner
        if device is None:
            backend = str(dist.get_backend(group)).lower()
            device = torch.device("cuda", torch.cuda.current_device()) if "nccl" in backend else torch.device("cpu")
        self.device = torch.device(device)
        # What every rank must agree on besides the plan itself (compared each step); a repr that
        # holds an address differs between processes, so only the type counts then (the plans are
        # compared by fingerprint anyway).
        described = repr(planner)
        if " at 0x" in described:
            described = type(planner).__qualname__
        self._settings = _stable_hash(f"{described}|{self.samples_per_rank}|{self.uneven}")

    def __repr__(self) -> str:
        return (
            f"BalancedStream(rank={self.rank}/{self.ranks}, samples_per_rank={self.samples_per_rank}, "
            f"uneven={self.uneven!r}, planner={self.planner!r})"
        )

    # --- collectives --------------------------------------------------------

    def _wait(self, work: Any, step: int, what: str) -> None:
        try:
            if self.timeout is None:
                work.wait()
            else:
                work.wait(timeout=self.timeout)
        except RuntimeError as e:
            timed_out = "timed out" in str(e).lower() or "timeout" in str(e).lower()
            limit = "the process group's timeout" if self.timeout is None else f"{self.timeout.total_seconds():g} s"
            raise StreamError(
                f"step {step}: rank {self.rank} waited {limit} for the other ranks in the {what} and gave up "
                f"({type(e).__name__}: {e}): a rank stopped without raising (killed, hung, or failed outside "
                "the stream); the process group cannot be used any more",
                ranks=[self.rank],
                step=step,
                kind="Timeout" if timed_out else "Communication",
            ) from e

    def _all_gather(self, t: torch.Tensor, step: int, what: str) -> List[torch.Tensor]:
        import torch.distributed as dist

        t = t.to(self.device)
        out = [torch.empty_like(t) for _ in range(self.ranks)]
        self._wait(dist.all_gather(out, t, group=self.group, async_op=True), step, what)
        return [o.cpu() for o in out]

    # --- reading ------------------------------------------------------------

    def _read(self, it: Iterator[Any], state: Dict[str, Any], keys: Dict[str, int]) -> Tuple[List[_Local], Optional[BaseException], str]:
        """Up to ``samples_per_rank`` samples: ``(samples, error, message)``."""
        got: List[_Local] = []
        if state["ended"] or state["failed"]:
            return got, None, ""
        for _ in range(self.samples_per_rank):
            k = state["read"]
            where = f"sample {k} of rank {self.rank}'s stream"
            try:
                raw = next(it)
            except StopIteration:
                state["ended"] = True
                break
            except Exception as e:  # the user's loader: any failure is reported to every rank
                state["failed"] = True
                return got, e, f"{where} could not be read: {type(e).__name__}: {e}"
            try:
                sample = _as_sample(raw, where)
            except Error as e:  # names the sample and the key
                state["failed"] = True
                return got, e, str(e)
            try:
                text, images, loss = _meta_row(self.metadata, raw)
            except Exception as e:  # the user's metadata callable
                state["failed"] = True
                return got, e, f"{where}: the metadata callable raised {type(e).__name__}: {e}"
            size = 16 + sum(8 * (3 + t.dim()) + _pad8(t.numel() * t.element_size()) for t in sample.values())
            for key in sample:
                if key not in keys and key not in state["new_keys"]:
                    state["new_keys"].append(key)
            got.append(_Local(self.rank + self.ranks * k, sample, text, images, loss, size))
            state["read"] = k + 1
        return got, None, ""

    def _header(
        self,
        step: int,
        new: int,
        new_images: int,
        state: Dict[str, Any],
        error: Optional[BaseException],
        message: str,
        keys: Dict[str, int],
        table: List[str],
    ) -> np.ndarray:
        """The header round: every rank's status, new samples, ended flag and new key names. Raises on every rank on a failure."""
        new_keys = sorted(state["new_keys"])
        text = message if error is not None else "\n".join(new_keys)
        data = text.encode()
        if error is None and len(data) > _TEXT_BYTES:
            error, message = (
                InputError("too many new keys"),
                f"rank {self.rank}'s samples bring {len(new_keys)} new keys at once ({len(data)} bytes of names, "
                f"at most {_TEXT_BYTES}): shorten the key names",
            )
            data = message.encode()
        data = data[:_TEXT_BYTES].ljust(_TEXT_BYTES, b"\0")
        words = np.array(
            [_FAILED if error is not None else _OK, step, new, int(state["ended"]), self._settings, len(table), new_images, 0],
            dtype=np.int64,
        )
        mine = torch.from_numpy(np.concatenate([words, np.frombuffer(data, dtype=np.int64)]))
        rows = torch.stack(self._all_gather(mine, step, "status round")).numpy()
        heads = rows[:, :_HEAD_WORDS]
        texts = [rows[r, _HEAD_WORDS:].tobytes().rstrip(b"\0").decode(errors="replace") for r in range(self.ranks)]
        failed = [r for r in range(self.ranks) if heads[r, 0] != _OK]
        if failed:
            r = failed[0]
            more = f" (ranks {failed} failed)" if len(failed) > 1 else ""
            exc = StreamError(f"step {step}: {texts[r]}{more}", ranks=failed, step=step, kind="StreamFailed")
            raise exc from error
        if len(set(heads[:, 1].tolist())) > 1:
            raise InternalError(f"the ranks are at different steps: {heads[:, 1].tolist()}")
        settings = heads[:, 4]
        differ = [r for r in range(self.ranks) if settings[r] != settings[0]]
        if differ:
            from .torch import PlanMismatchError

            raise PlanMismatchError(
                f"step {step}: the stream settings of ranks {differ} differ from rank 0's (the planner, "
                "samples_per_rank or uneven): every rank must build its BalancedStream with the same settings",
                ranks=differ,
            )
        # The key table grows by the new names of every rank, in one order everywhere.
        for name in sorted({n for t in texts for n in t.split("\n") if n} - set(table)):
            keys[name] = len(table)
            table.append(name)
        state["new_keys"] = [k for k in state["new_keys"] if k not in keys]
        if self.uneven == "error":
            counts = heads[:, 2]
            short = [r for r in range(self.ranks) if counts[r] < counts.max()]
            if short:
                raise StreamError(
                    f"step {step}: the streams of ranks {short} ended early (this step read "
                    f"{counts.tolist()} samples by rank) and uneven='error' asks for streams of one length: "
                    "give every rank the same number of samples, or use uneven='drain'",
                    ranks=short,
                    step=step,
                    kind="StreamEnded",
                )
        return heads

    # --- one step -----------------------------------------------------------

    def _meta_round(self, step: int, cur: List[_Local], counts: np.ndarray, images: np.ndarray) -> np.ndarray:
        """Every rank's samples' metadata: rows (id, text, loss, images, bytes) and the images' tokens, rank by rank."""
        width = int(max(5 * counts[r] + images[r] for r in range(self.ranks)))
        mine = np.zeros(max(width, 1), dtype=np.int64)
        rows = np.array([[s.id, s.text, s.loss, len(s.images), s.bytes] for s in cur], dtype=np.int64).reshape(-1)
        imgs = np.array([v for s in cur for v in s.images], dtype=np.int64)
        mine[: rows.shape[0]] = rows
        mine[rows.shape[0] : rows.shape[0] + imgs.shape[0]] = imgs
        return torch.stack(self._all_gather(torch.from_numpy(mine), step, "metadata round")).numpy()

    def _plan(self, gathered: np.ndarray, counts: np.ndarray, images: np.ndarray) -> Plan:
        meta = np.concatenate([gathered[r, : 5 * counts[r]].reshape(-1, 5) for r in range(self.ranks)])
        values = np.concatenate([gathered[r, 5 * counts[r] : 5 * counts[r] + images[r]] for r in range(self.ranks)])
        offsets = np.zeros(meta.shape[0] + 1, dtype=np.int64)
        np.cumsum(meta[:, 3], out=offsets[1:])
        ids = meta[:, 0]
        return self.planner.plan(
            ids.astype(np.uint64),
            meta[:, 1],
            (values, offsets.astype(np.uint64)),
            meta[:, 2],
            origins=(ids % self.ranks).astype(np.int64),
            bytes=meta[:, 4],
        )

    def _exchange(
        self, step: int, plan: Plan, cur: List[_Local], keys: Dict[str, int], table: List[str], timings: Dict[str, float]
    ) -> Tuple[Dict[int, Dict[str, torch.Tensor]], int, int]:
        """Sends this rank's moving samples and receives the ones it is planned: ``(received by id, bytes sent,
        bytes received)``; adds the seconds of ``"encode"``, ``"transfer"`` and ``"decode"`` to ``timings``."""
        t0 = time.perf_counter()
        import torch.distributed as dist

        ex = plan.exchange
        if ex is None:  # every sample has an origin, so the plan has an exchange
            raise InternalError("the plan of a stream step has no exchange")
        moves = ex.moves
        src = moves.src.astype(np.int64)
        dst = moves.dst.astype(np.int64)
        mids = moves.ids
        nbytes = moves.bytes.astype(np.int64)
        out_mask = src == self.rank
        in_mask = dst == self.rank
        send_sizes = np.bincount(dst[out_mask], weights=nbytes[out_mask], minlength=self.ranks).astype(np.int64)
        recv_sizes = np.bincount(src[in_mask], weights=nbytes[in_mask], minlength=self.ranks).astype(np.int64)
        mine = {s.id: s.sample for s in cur}
        # Moves are sorted by (source, destination, id): this rank's are one run, by destination then id.
        records = [(int(i), mine[int(i)]) for i in mids[out_mask]]
        payload = _encode(records, keys, int(send_sizes.sum())).to(self.device)
        received = torch.empty(int(recv_sizes.sum()), dtype=torch.uint8, device=self.device)
        work = dist.all_to_all_single(
            received, payload, recv_sizes.tolist(), send_sizes.tolist(), group=self.group, async_op=True
        )
        t1 = time.perf_counter()
        self._wait(work, step, "exchange")
        data = received.cpu().numpy()
        t2 = time.perf_counter()
        out: Dict[int, Dict[str, torch.Tensor]] = {}
        off = 0
        in_src, in_ids = src[in_mask], mids[in_mask]
        for r in range(self.ranks):
            n = int(recv_sizes[r])
            expected = [int(i) for i in in_ids[in_src == r]]
            out.update(_decode(data[off : off + n], expected, table, r))
            off += n
        timings.update(encode=t1 - t0, transfer=t2 - t1, decode=time.perf_counter() - t2)
        return out, int(send_sizes.sum()), int(recv_sizes.sum())

    def _check(self, step: int, plan: Optional[Plan], error: Optional[BaseException], message: str) -> None:
        """The fingerprint round: every rank's planning status and plan fingerprint. Raises on every rank on a difference."""
        data = message.encode()[:_TEXT_BYTES].ljust(_TEXT_BYTES, b"\0")
        fp = 0 if plan is None else int(np.array(plan.fingerprint, dtype=np.uint64).view(np.int64))
        words = np.array([_OK if error is None else _FAILED, fp], dtype=np.int64)
        mine = torch.from_numpy(np.concatenate([words, np.frombuffer(data, dtype=np.int64)]))
        rows = torch.stack(self._all_gather(mine, step, "fingerprint round")).numpy()
        failed = [r for r in range(self.ranks) if rows[r, 0] != _OK]
        if failed:
            if error is not None and len(failed) == self.ranks:
                raise error  # every rank planned the same step and failed alike: the planner's own error
            r = failed[0]
            text = rows[r, 2:].tobytes().rstrip(b"\0").decode(errors="replace")
            raise StreamError(
                f"step {step}: {text} (ranks {failed} failed where the others planned the same metadata: "
                "check that every rank builds its planner with the same settings)",
                ranks=failed,
                step=step,
                kind="StreamFailed",
            ) from error
        differ = [r for r in range(self.ranks) if rows[r, 1] != rows[0, 1]]
        if differ:
            from .torch import PlanMismatchError

            r = differ[0]
            a, b = (int(np.array(rows[i, 1], dtype=np.int64).view(np.uint64)) for i in (0, r))
            raise PlanMismatchError(
                f"step {step}: the plans differ between ranks (ranks {differ} differ from rank 0; rank {r} has "
                f"fingerprint {b:#018x} where rank 0 has {a:#018x}): every rank must build its BalancedStream "
                "with the same planner settings",
                ranks=differ,
            )

    def __iter__(self) -> Iterator[StreamStep]:
        """Yields this rank's steps; every rank must iterate in step (see the class)."""
        it = iter(self.samples)
        state: Dict[str, Any] = {"ended": False, "failed": False, "read": 0, "new_keys": []}
        keys: Dict[str, int] = {}
        table: List[str] = []
        R = self.ranks
        step = 0
        t_read = 0.0

        def read(pulled: List[_Local]) -> Tuple[np.ndarray, np.ndarray]:
            """Reads the next samples into ``pulled``; every rank's (new samples, new images) and the headers."""
            nonlocal t_read
            t0 = time.perf_counter()
            got, error, message = self._read(it, state, keys)
            t_read += time.perf_counter() - t0
            pulled.extend(got)
            heads = self._header(step, len(got), sum(len(s.images) for s in got), state, error, message, keys, table)
            return heads[:, [2, 6]].copy(), heads

        cur: List[_Local] = []
        nxt: List[_Local] = []
        cur_n, _ = read(cur)
        nxt_n, heads = read(nxt)
        while True:
            # Fold the read-ahead into this step while this step is too small to plan, or while the
            # read-ahead is the epoch's tail (every stream has ended) and too small to stand alone.
            while True:
                tc, tn = int(cur_n[:, 0].sum()), int(nxt_n[:, 0].sum())
                if tn > 0 and (tc < R or (tn < R and bool(heads[:, 3].all()))):
                    cur.extend(nxt)
                    nxt = []
                    cur_n = cur_n + nxt_n
                    nxt_n, heads = read(nxt)
                    continue
                break
            if tc == 0:
                return
            if tc < R:
                raise StreamError(
                    f"step {step}: the streams hold {tc} samples in all, fewer than the {R} ranks: "
                    "every rank needs a sample (use fewer ranks or more data)",
                    ranks=[r for r in range(R) if cur_n[r, 0] == 0],
                    step=step,
                    kind="TooFewSamples",
                )
            t1 = time.perf_counter()
            counts, images = cur_n[:, 0], cur_n[:, 1]
            gathered = self._meta_round(step, cur, counts, images)
            t2 = time.perf_counter()
            error: Optional[BaseException] = None
            message = ""
            plan: Optional[Plan] = None
            try:
                plan = self._plan(gathered, counts, images)
            except Exception as e:
                error, message = e, f"planning failed on rank {self.rank}: {type(e).__name__}: {e}"
            t3 = time.perf_counter()
            self._check(step, plan, error, message)
            if plan is None:  # unreachable: _check raised
                raise InternalError("a failed plan passed the fingerprint round")
            timings = {"read": t_read, "gather": t2 - t1, "plan": t3 - t2, "check": time.perf_counter() - t3}
            received, sent, got = self._exchange(step, plan, cur, keys, table, timings)
            local = {s.id: s.sample for s in cur}
            local.update(received)
            batches = [[local[int(i)] for i in plan.micro_batch(self.rank, j)] for j in range(plan.micro_steps)]
            t4 = time.perf_counter()
            timings["exchange"] = t4 - t3
            result = StreamStep(step, self.rank, plan, batches, sent, got, timings)
            del local, received
            cur, cur_n = nxt, nxt_n
            nxt = []
            step += 1
            t_read = 0.0
            yield result
            del result
            nxt_n, heads = read(nxt)

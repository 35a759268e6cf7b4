"""The streaming path of :mod:`microbatch.torch`: per-rank loaders balanced step by step.

Its public names are re-exported by :mod:`microbatch.torch`; import them from there.

Every rank reads its own stream of samples (an ``IterableDataset``, a
WebDataset-style shard reader, any iterable of dicts of tensors). Before its
first read of a pass, :class:`BalancedStream` compares on every rank the
settings that shape its collectives (``samples_per_rank``, ``uneven``, the
planner, the metadata callable's name, the version of its protocol) in one
``all_gather`` whose size does not depend on them, so that ranks built
differently raise :class:`PlanMismatchError` there, naming each setting and
every rank's value, instead of meeting in collectives of different sizes. Then
for every optimizer step it

1. takes ``samples_per_rank`` samples from this rank's stream (reading one step
   ahead, so that the last samples of an epoch can join the step before);
2. gathers every rank's status, sample counts and the metadata of the
   samples it just read in one ``all_gather`` of a fixed-size ``int64``
   header (9 words a sample it may read: a second ``all_gather`` only for a
   read with more than 4 images a sample on average): no pickled objects;
3. plans the step with :meth:`microbatch.Planner.plan` on every rank from the
   same gathered metadata, with each sample's origin (the rank that read it)
   and its bytes (its serialized size), so that ``locality=`` keeps samples
   home; the ranks compare their plans' fingerprints (one more ``all_gather``);
4. ships the samples that change rank with one
   ``torch.distributed.all_to_all_single`` of ``uint8`` buffers (the sizes are
   known to every rank from the gathered metadata; a buffer is one
   ``torch.cat`` of the tensors' bytes and an ``int64`` header table, and the
   received tensors are views of the received buffer), confirms on every rank
   that everything was encoded and decoded (one more ``all_gather``), and
   yields this rank's micro-batches in plan order, with the step's loss scales.

A failure on any rank (its loader raises, a sample cannot be shipped or
decoded, the settings or plans differ, a stream ends early under
``uneven="error"``) is reported to every rank at the step's next collective,
and every rank raises the same :class:`StreamError` (or
:class:`PlanMismatchError`): no rank is left waiting in a collective, and a
step is yielded on every rank or on none. A rank whose process ends (killed,
crashed) makes the ranks that talk to it in their next collective raise
:class:`StreamError` kind ``"Communication"`` as soon as they see its
connection close, saying so and how long they waited (in larger groups, a
rank waiting on one of those times out); a rank that hangs makes the others
raise kind ``"Timeout"`` after ``timeout=``, saying it timed out. See
:class:`BalancedStream` for the epoch-end policy, the devices and the timeout.
"""

from __future__ import annotations

import dataclasses
import datetime
import operator
import time
from typing import Any, Callable, Dict, Iterable, Iterator, List, Mapping, Optional, Sequence, Tuple

import numpy as np
import torch

from . import _arrays
from ._step import (
    STATUS_TEXT,
    PlanView,
    differences_text,
    failure_text,
    group_device,
    raise_failed,
    settings_round,
    stable_digest,
    status_round,
    wait_collective,
)
from ._torch_common import PLANNER_SETTINGS, PlanMismatchError, loss_token_count, planner_for
from .errors import DtypeError, Error, InputError, InternalError, SettingError
from .plan import Plan, Planner

__all__ = ["BalancedStream", "StreamStep", "StreamError", "UNEVEN_POLICIES", "sample_bytes"]

#: What :class:`BalancedStream` does when the ranks' streams end at different steps.
UNEVEN_POLICIES = ("drain", "error")

# --- the wire format -----------------------------------------------------------
#
# The all-to-all sends every destination one chunk: the headers of its records
# (the samples it is sent, in plan order), then their tensors' data in the same
# order. Every part is a multiple of 8 bytes long, so that every tensor's data
# starts 8-byte aligned in the chunk:
#
#   per record: [id, tensors]                                2 words
#               per tensor: [key index, dtype word, ndim, *shape]  3 + ndim words
#   per record, per tensor: its bytes, zero-padded to a multiple of 8
#
# So a sample's share of a chunk is 16 + sum(8 * (3 + ndim) + pad8(data bytes)),
# the same whatever it is sent with: sample_bytes(), the planner's `bytes`.
# The key index points into the stream's key table, which the ranks agree on in
# the header round (every new key name travels once). The dtype word holds the
# dtype's code (a fixed table, the same in every version of torch) in its low
# byte and _ACCELERATOR when the tensor left from a device other than the CPU.
#
# Encoding is one torch.cat of byte views of the tensors (no copy before it for
# a contiguous CPU tensor) and one int64 array of the headers built from one
# list; decoding reads the headers (tolist() of a window of words, widened as
# needed: O(header words)) and gives every tensor as a view of the received
# buffer: no copy of the data at all (a complex128 at an offset that is not a
# multiple of 16 is copied, as torch views need the element's alignment).

_DTYPE_NAMES = (
    "bool", "uint8", "int8", "int16", "int32", "int64", "float16", "bfloat16", "float32",
    "float64", "complex64", "complex128", "uint16", "uint32", "uint64",
    "float8_e4m3fn", "float8_e5m2",
)  # append only: a code is the position here, on every rank whatever its torch version
_DTYPES: Tuple[Optional[torch.dtype], ...] = tuple(
    d if isinstance(d, torch.dtype) else None for d in (getattr(torch, name, None) for name in _DTYPE_NAMES)
)
_DTYPE_CODE: Dict[torch.dtype, int] = {d: i for i, d in enumerate(_DTYPES) if d is not None}
_SIZES: Tuple[int, ...] = tuple(0 if d is None else torch.empty((), dtype=d).element_size() for d in _DTYPES)
_ACCELERATOR = 0x100  # in the dtype word: the tensor was on a device other than the CPU where it was read
_MAX_NDIM = 64  # a header claiming more dimensions (or more tensors a sample than _MAX_TENSORS) is corrupt
_MAX_TENSORS = 1 << 16
_PADS = tuple(torch.zeros(p, dtype=torch.uint8) for p in range(8))

#: The version of the stream's collectives after the settings round (their sizes and layouts): the first
#: word of the settings round, so that ranks running versions that talk differently raise
#: PlanMismatchError instead of meeting in collectives of different sizes.
_PROTOCOL = 2


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


def _raw(t: torch.Tensor) -> torch.Tensor:
    """A tensor's data as a flat ``uint8`` tensor on its device: a view when it is contiguous."""
    if t.is_conj():
        t = t.resolve_conj()
    if t.is_neg():
        t = t.resolve_neg()
    if t.dim() == 1 and t.is_contiguous():  # the common case, one torch call (reshape costs one more)
        return t.view(torch.uint8)
    return t.contiguous().reshape(-1).view(torch.uint8)


def _encode(
    chunks: Sequence[Sequence[Tuple[int, Mapping[str, torch.Tensor]]]],
    keys: Mapping[str, int],
    size: int,
    device: torch.device,
    out: Optional[torch.Tensor] = None,
) -> torch.Tensor:
    """The chunks (each the records for one destination) as one ``uint8`` buffer of ``size`` bytes on ``device``.

    O(size) time: one copy of every tensor's bytes (by ``torch.cat``; a
    non-contiguous tensor is made contiguous first), a few Python operations
    a tensor (its byte view and header words), no per-byte Python work.
    ``out``: a CPU ``uint8`` buffer of at least ``size`` bytes to write into
    when every tensor is on the CPU (reused from step to step, it saves
    the first-touch page faults of a new buffer: about 40% of the copy).
    """
    pieces: List[torch.Tensor] = []
    for records in chunks:
        if not records:
            continue
        words: List[int] = []
        data: List[torch.Tensor] = []
        for sid, sample in records:
            words += (sid, len(sample))
            for k, t in sample.items():
                flag = 0 if t.is_cpu else _ACCELERATOR
                words += (keys[k], _DTYPE_CODE[t.dtype] | flag, t.dim(), *t.shape)
                n = t.nbytes
                if n:
                    data.append(_raw(t))
                    if n & 7:
                        data.append(_PADS[8 - (n & 7)])
        pieces.append(torch.from_numpy(np.array(words, dtype=np.int64)).view(torch.uint8))
        pieces += data
    if not pieces:
        buf = torch.empty(0, dtype=torch.uint8, device=device)
    else:
        where = {p.device for p in pieces}
        if len(where) == 1 and out is not None and out.device in where and out.numel() >= size:
            buf = torch.cat(pieces, out=out[:size]).to(device)
        elif len(where) == 1:  # one copy into a buffer on their device, then (NCCL: CPU data) one transfer
            buf = torch.cat(pieces).to(device)
        else:  # data on the accelerator and headers on the CPU: every piece to the group's device
            buf = torch.cat([p.to(device) for p in pieces])
    if buf.numel() != size:
        raise InternalError(f"the exchange encoded {buf.numel()} bytes where the plan counted {size}")
    return buf


def _strides(shape: Sequence[int]) -> List[int]:
    """The strides of a contiguous tensor of ``shape``, in elements."""
    out = [1] * len(shape)
    acc = 1
    for i in range(len(shape) - 1, -1, -1):
        out[i] = acc
        acc *= shape[i]
    return out


class _Words:
    """The ``int64`` words at the start of a chunk, read as Python ints a window at a time (O(words read))."""

    __slots__ = ("_view", "_words", "_src")

    def __init__(self, view: np.ndarray, src: int) -> None:
        self._view = view
        self._words: List[int] = []
        self._src = src

    def need(self, end: int) -> List[int]:
        """The words up to ``end`` (at least) as a list; raises when the chunk is shorter."""
        have = len(self._words)
        if end > have:
            if end > self._view.shape[0]:
                raise InternalError(
                    f"rank {self._src} sent {8 * self._view.shape[0]} bytes, fewer than its samples' headers say"
                )
            stop = min(self._view.shape[0], max(end, 2 * have, 64))
            self._words += self._view[have:stop].tolist()
        return self._words


def _decode(
    host: torch.Tensor,
    device_buf: Optional[torch.Tensor],
    expected: Sequence[int],
    table: Sequence[str],
    src: int,
) -> Dict[int, Dict[str, torch.Tensor]]:
    """The records of one chunk (``host``, ``uint8`` on the CPU, from rank ``src``), which must be the samples
    ``expected`` in order, by id.

    Every tensor is a view of the chunk: of ``host`` when it left from the CPU,
    of ``device_buf`` (the same bytes on the group's device; ``None``: the
    chunk is on the CPU only) when it left from an accelerator. O(header words
    + tensors) Python work, no copy of the data. Anything that does not match
    the plan or the headers (a sample id, a dtype this torch lacks, a key
    outside the table, sizes that do not add up) raises :class:`InternalError`
    naming the sending rank.
    """
    total = host.shape[0]
    if total % 8:
        raise InternalError(f"rank {src} sent {total} bytes, not a multiple of 8")
    words = _Words(host.numpy().view(np.int64), src)
    specs: List[Tuple[int, str, torch.dtype, int, List[int], int, bool]] = []
    at = 0  # in words
    for want in expected:
        w = words.need(at + 2)
        sid, count = w[at], w[at + 1]
        at += 2
        if sid != want:
            raise InternalError(f"rank {src} sent sample {sid} where the plan expects {want}")
        if not 0 <= count <= _MAX_TENSORS:
            raise InternalError(f"rank {src} sent sample {sid} with {count} tensors")
        for _ in range(count):
            w = words.need(at + 3)
            key, word, ndim = w[at], w[at + 1], w[at + 2]
            code, flag = word & 0xFF, word & ~0xFF
            if not 0 <= key < len(table) or not 0 <= code < len(_DTYPES) or flag not in (0, _ACCELERATOR):
                raise InternalError(f"rank {src} sent sample {sid} with a tensor header that is not one: {w[at:at + 3]}")
            dtype = _DTYPES[code]
            if dtype is None:
                raise InternalError(
                    f"rank {src} sent sample {sid} with {table[key]!r} of dtype torch.{_DTYPE_NAMES[code]}, which "
                    f"this rank's torch {torch.__version__} does not have: use one torch version on every rank"
                )
            if not 0 <= ndim <= _MAX_NDIM:
                raise InternalError(f"rank {src} sent sample {sid} with {table[key]!r} of {ndim} dimensions")
            w = words.need(at + 3 + ndim)
            shape = w[at + 3 : at + 3 + ndim]
            at += 3 + ndim
            numel = 1
            for d in shape:
                if d < 0:
                    raise InternalError(f"rank {src} sent sample {sid} with {table[key]!r} of shape {shape}")
                numel *= d
            specs.append((sid, table[key], dtype, _SIZES[code], shape, numel * _SIZES[code], flag != 0))
    off = 8 * at
    out: Dict[int, Dict[str, torch.Tensor]] = {i: {} for i in expected}
    # The chunk viewed once per dtype (its offset is a multiple of 8), each tensor then one as_strided.
    typed: Tuple[Dict[torch.dtype, torch.Tensor], Dict[torch.dtype, torch.Tensor]] = ({}, {})
    base = (host.storage_offset(), 0 if device_buf is None else device_buf.storage_offset())
    for sid, name, dtype, size, shape, n, on_device in specs:
        if off + n > total:
            raise InternalError(f"rank {src} sent {total} bytes, fewer than its samples' headers say")
        which = 1 if on_device and device_buf is not None else 0
        buf = device_buf if which and device_buf is not None else host
        at_byte = base[which] + off
        if n == 0:
            t = torch.empty(shape, dtype=dtype, device=buf.device)
        elif size <= 8:
            view = typed[which].get(dtype)
            if view is None:
                view = typed[which][dtype] = buf.view(dtype)
            t = view.as_strided(shape, [1] if len(shape) == 1 else _strides(shape), at_byte // size)
        else:  # a 16-byte element (complex128): copied when it is not 16-byte aligned
            raw = buf[off : off + n]
            t = (raw.clone() if at_byte % size else raw).view(dtype).view(shape)
        out[sid][name] = t
        off += _pad8(n)
    if off != total:
        raise InternalError(f"rank {src} sent {total} bytes where its samples take {off}")
    return out


# --- errors --------------------------------------------------------------------


class StreamError(Error, RuntimeError):
    """A failure of :class:`BalancedStream`, raised on every rank with the same message.

    Attributes:
        ranks: the ranks where it happened (a loader that raised, a stream that
            ended early); for ``"Timeout"`` and ``"Communication"``, the rank
            that raised it (it cannot tell which peer stopped); ``item`` is
            the first.
        step: the step at which the ranks found out (``None`` when not known).
        kind: ``"StreamFailed"`` (a rank's samples cannot be iterated, its
            loader, its metadata callable, a sample or its planner failed, or
            the key names of one step's new keys exceed 1 KiB; the original
            exception is the ``__cause__`` on that rank), ``"Exchange"`` (a
            rank could not encode the samples it sends or decode the ones it
            received: the step is yielded on no rank), ``"StreamEnded"``
            (streams of different lengths with ``uneven="error"``),
            ``"TooFewSamples"`` (fewer samples in all than ranks),
            ``"Timeout"`` (this rank's collective waited ``timeout`` and timed
            out: another rank hung or did not reach it) or ``"Communication"``
            (this rank's collective failed otherwise, usually at once: the
            connection to another rank closed because that rank's process
            ended, killed or crashed). These two are raised on the ranks that
            see them, not through a status round; their message says which
            collective, what happened and how many seconds this rank waited,
            and the backend's exception is the ``__cause__``. After them the
            process group must not be used any more.

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
            tensors); a sample received from another rank holds tensors of
            the same dtypes, shapes and values, views of this step's receive
            buffer (no copy; keeping one keeps the buffer). A received tensor
            is on the CPU when it was a CPU tensor where it was read, else on
            the stream's :attr:`~BalancedStream.device` (under NCCL this
            rank's CUDA device; under gloo the CPU).
        bytes_sent, bytes_received: the bytes this rank's all-to-all sent to
            and received from the other ranks (equal to the plan's
            ``exchange.bytes_out[rank]`` and ``bytes_in[rank]``).
        timings: seconds spent on this rank: ``"read"`` (the loader, since
            the step before), ``"gather"`` (the header rounds since the step
            before: every rank's status and metadata),
            ``"plan"`` (the planner), ``"exchange"`` (everything after
            planning: ``"check"``, the fingerprint all-gather; ``"encode"``;
            ``"transfer"``, the all-to-all; ``"decode"``, with building
            :attr:`batches`; ``"confirm"``, the all-gather in which every
            rank says it decoded everything).

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
    if "input_ids" not in sample:
        raise InputError(
            "the sample has no 'input_ids': give BalancedStream a metadata= callable that returns "
            "(text_tokens, image_tokens[, loss_tokens]) for it",
            item="input_ids",
        )
    x = torch.as_tensor(sample["input_ids"]).reshape(-1)
    labels = sample.get("labels")
    y = x if labels is None else torch.as_tensor(labels).reshape(-1)
    return int(x.shape[0]), (), loss_token_count(y)


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


#: Words of metadata a rank's header carries per sample it may read: 5 a sample (id, text, loss, images,
#: bytes) and room for 4 images' token counts a sample on average; a read with more images than that
#: sends its metadata in a second all-gather.
_META_WORDS = 9


def _metadata_words(got: Sequence["_Local"]) -> np.ndarray:
    """The metadata of samples just read as ``int64`` words: rows (id, text, loss, images, bytes), then the
    images' token counts, sample by sample."""
    rows = np.array([[s.id, s.text, s.loss, len(s.images), s.bytes] for s in got], dtype=np.int64).reshape(-1)
    images = np.array([v for s in got for v in s.images], dtype=np.int64)
    return np.concatenate([rows, images])


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
        device: where the collectives' buffers live (:attr:`device`): ``None``
            picks this rank's current CUDA device for NCCL (which
            communicates from device memory only) and the CPU otherwise.
            Every buffer is moved there explicitly before a collective and
            read back on the CPU after it (the headers and metadata are small).
            Samples to send are concatenated where their tensors are (one
            copy to the device when they are on the CPU; tensors already on
            it are not moved through the CPU). Received tensors that were
            CPU tensors where they were read are views of a CPU copy of the
            received buffer (under NCCL: one device-to-host copy of it a
            step); the others are views of the buffer on ``device``. NCCL is
            not tested here (no GPU on the test machines): gloo is.
        timeout: seconds any one collective of the stream may wait for the
            other ranks before this rank raises :class:`StreamError` (kind
            ``"Timeout"``); ``None``: the process group's own timeout
            (``init_process_group(timeout=...)``; 30 minutes for gloo by default).
            It may differ between ranks (it only bounds this rank's wait).

    Settings: before its first read of each pass, every rank sends the
    settings that shape the stream's collectives in one ``all_gather`` of
    17 words + 1 KiB, the same size whatever they are: the version of the
    stream's protocol, ``samples_per_rank`` (it sizes the header round),
    ``uneven`` (it decides where a rank raises when a stream ends), the
    planner (its ``repr``, or its type's name when the ``repr`` holds an
    address: it sizes the exchange) and the metadata callable (by module
    and qualified name). Where any differs, every rank raises
    :class:`PlanMismatchError` there, before reading a sample, naming each
    setting that differs and every rank's value (e.g. ``samples_per_rank is
    6 on rank 0 and 5 on rank 1``). ``timeout``, ``device`` and the group
    are not compared: they do not change what the collectives carry.

    Faults and the timeout: a failure inside the stream on any rank (its
    samples cannot be iterated, its loader raises, its metadata callable
    raises, a sample holds something that is not a tensor, the plans
    differ, a stream ends early under ``"error"``, a sample cannot be
    encoded or the received bytes cannot be decoded) is sent to every rank
    in the next status round (the settings, header, fingerprint or confirm
    round), and every rank raises the same error there:
    :class:`StreamError`, or :class:`PlanMismatchError` for settings or
    plans that differ (a planner error that every rank raises alike, e.g.
    an :class:`~microbatch.OversizeError`, is raised as it is). No rank
    waits longer than the slowest rank takes to reach that round. A rank
    that stops without raising inside the stream is seen by the others at
    their next collective, each raising :class:`StreamError` on its own
    (not through a status round) with the collective, what happened and the
    seconds it waited in the message. Where its process ended (killed,
    crashed, or exited after failing in the training loop between steps)
    its connections close: the ranks whose part of the collective talks to
    it raise kind ``"Communication"`` as soon as the backend sees that
    (under gloo on one machine, within a fraction of a second; the message
    says the connection to another rank closed), while in a group of more
    than 2 ranks a rank that waits on one of those (gloo's all-gather is a
    ring) raises kind ``"Timeout"`` after ``timeout`` seconds. Where it is
    alive but does not come (hung, or stopped iterating while the others go
    on: stop every rank at the same step) or its machine vanished without
    closing its connections, the others raise kind ``"Timeout"`` after
    ``timeout`` seconds (the message says it timed out). After either, the
    process group cannot be used any more: set ``timeout`` to what a step
    may take at most, so that every rank stops soon after a failure. No
    sample is dropped or trained twice: a step is either yielded on every
    rank or raises on every rank (the confirm round comes after the
    exchange).

    Per pass: the settings round (17 words + 1 KiB per rank). Per step:
    three ``all_gather`` (the header: 7 words + 1 KiB + 9 words a sample it
    may read per rank, holding the metadata of the samples read, 5 words a
    sample + 1 word an image, and a second ``all_gather`` of the metadata
    alone only when a rank's read holds more than 4 images a sample on
    average; the fingerprints and the confirmation, 2 and 1 words + 1 KiB)
    and one ``all_to_all_single`` carrying the moved samples' bytes; planning is the planner's (every rank
    plans the whole step); encoding is O(the bytes sent), one copy of them;
    decoding O(the received samples' header words), no copy. Memory: two
    steps' samples on this rank (the one being trained and the one read
    ahead), the received buffer, and a send buffer of up to 1.25 times the
    most bytes this rank sent in one step (kept, so that encoding writes
    into memory already mapped).

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
        unknown = sorted(set(planner_settings) - set(PLANNER_SETTINGS)) if planner is None else []
        if unknown and model is not None and seq_len is not None:
            raise SettingError(
                f"unknown planner setting {unknown[0]!r}: use one of {', '.join(sorted(PLANNER_SETTINGS))}",
                item=unknown[0],
            )
        self.planner = planner = planner_for(
            planner, model, seq_len, planner_settings, ranks=self.ranks, ranks_are="the process group has"
        )
        #: Where the collectives' buffers live (see ``device``).
        self.device = group_device(group) if device is None else torch.device(device)
        # What every rank must agree on besides the plan itself (compared each step); a repr that
        # holds an address differs between processes, so only the type counts then (the plans are
        # compared by fingerprint anyway).
        described = repr(planner)
        if " at 0x" in described:
            described = type(planner).__qualname__
        # The metadata callable by its name (module and qualified name; a callable object by its type's):
        # a rank that measures its samples with another function would plan what the others do not expect.
        meta = self.metadata
        named = meta if hasattr(meta, "__qualname__") else type(meta)
        measured = f"{getattr(named, '__module__', '')}.{getattr(named, '__qualname__', '')}"
        from . import __version__

        # Compared in the settings round before anything else, by value or digest: samples_per_rank sizes
        # the header round, uneven decides which rank raises where a stream ends, the planner sizes the
        # exchange (its plans are compared by fingerprint each step too), the protocol sizes all of them.
        self._settings: List[Tuple[str, int, str]] = [
            ("protocol", _PROTOCOL, f"{_PROTOCOL} (microbatch {__version__})"),
            ("samples_per_rank", self.samples_per_rank, str(self.samples_per_rank)),
            ("uneven", UNEVEN_POLICIES.index(self.uneven), repr(self.uneven)),
            ("planner", stable_digest(described), described),
            ("metadata", stable_digest(measured), measured),
        ]
        self._send = torch.empty(0, dtype=torch.uint8)  # the encoded samples, on the CPU, reused step to step

    def __repr__(self) -> str:
        return (
            f"BalancedStream(rank={self.rank}/{self.ranks}, samples_per_rank={self.samples_per_rank}, "
            f"uneven={self.uneven!r}, planner={self.planner!r})"
        )

    # --- collectives --------------------------------------------------------

    def _collective(self, start: Callable[[], Any], step: int, what: str) -> None:
        """Runs one collective (``start()``: the ``async_op=True`` call) within :attr:`timeout`; a timeout or
        a failure (a peer's closed connection) raises :class:`StreamError` saying which, after how long."""

        def fail(kind: str, text: str, waited: float) -> StreamError:
            return StreamError(
                f"step {step}: {text}; the process group cannot be used any more",
                ranks=[self.rank],
                step=step,
                kind=kind,
            )

        wait_collective(start, timeout=self.timeout, fail=fail, rank=self.rank, what=what)

    def _all_gather(self, t: torch.Tensor, step: int, what: str) -> List[torch.Tensor]:
        """Every rank's copy of ``t`` (a CPU tensor), on the CPU; the collective runs on :attr:`device`."""
        import torch.distributed as dist

        t = t.to(self.device)
        out = [torch.empty_like(t) for _ in range(self.ranks)]
        self._collective(lambda: dist.all_gather(out, t, group=self.group, async_op=True), step, what)
        return [o.cpu() for o in out]

    def _agree(self, error: Optional[BaseException], message: str) -> None:
        """The settings round, before the first read of a pass: every setting that shapes the collectives
        (:attr:`_settings`), in a collective whose size does not depend on them. Raises
        :class:`PlanMismatchError` on every rank naming each setting that differs and every rank's value,
        or :class:`StreamError` on every rank where one failed (``error``: its samples cannot be iterated)."""
        failed, texts, differences = settings_round(
            lambda t: self._all_gather(t, 0, "settings round"), self._settings, error, message
        )

        def failure(text: str, ranks: List[int]) -> StreamError:
            more = f" (ranks {ranks} failed)" if len(ranks) > 1 else ""
            return StreamError(f"step 0: {text}{more}", ranks=ranks, step=0, kind="StreamFailed")

        raise_failed(failed, texts, error, failure, own_if_all=False)
        if differences:
            differ = sorted({r for _, values in differences for _, ranks in values[1:] for r in ranks})
            fix = (
                "install the same microbatch version on every rank"
                if differences[0][0] == "protocol"
                else "build every rank's BalancedStream with the same samples_per_rank, uneven, planner (or model, "
                "seq_len and planner settings) and metadata callable"
            )
            raise PlanMismatchError(
                f"step 0: the ranks' stream settings differ ({differences_text(differences)}), so no rank reads "
                f"a sample: {fix}",
                ranks=differ,
            )

    def _status(
        self, step: int, what: str, words: Sequence[int], error: Optional[BaseException], message: str = ""
    ) -> Tuple[np.ndarray, List[int], List[str]]:
        """:func:`microbatch._step.status_round` through this stream's collectives (device, timeout)."""
        return status_round(lambda t: self._all_gather(t, step, what), words, error, message)

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
        got: List[_Local],
        state: Dict[str, Any],
        error: Optional[BaseException],
        message: str,
        keys: Dict[str, int],
        table: List[str],
    ) -> Tuple[np.ndarray, List[Tuple[np.ndarray, np.ndarray]]]:
        """The header round: every rank's status, new samples, ended flag, new key names and the metadata of
        the samples it just read (see :func:`_metadata_words`; a second all-gather only when a rank's do not
        fit). Raises on every rank on a failure. Returns every rank's words (step, new samples, ended,
        key-table size, new images, overflow) and every rank's metadata rows and image tokens. Its size
        depends on ``samples_per_rank``, which the settings round (:meth:`_agree`) made the same everywhere."""
        new, new_images = len(got), sum(len(s.images) for s in got)
        new_keys = sorted(state["new_keys"])
        text = message if error is not None else "\n".join(new_keys)
        size = len(text.encode())
        if error is None and size > STATUS_TEXT:
            text = (
                f"rank {self.rank}'s samples bring {len(new_keys)} new keys at once ({size} bytes of names, "
                f"at most {STATUS_TEXT}): shorten the key names"
            )
            error = InputError(text)
        width = _META_WORDS * self.samples_per_rank
        meta = _metadata_words(got)
        fits = meta.shape[0] <= width
        words = [step, new, int(state["ended"]), len(table), new_images, int(not fits)]
        padded = np.zeros(len(words) + width, dtype=np.int64)
        padded[: len(words)] = words
        if fits:
            padded[len(words) : len(words) + meta.shape[0]] = meta
        rows, failed, texts = self._status(step, "header round", padded.tolist(), error, text)
        heads = rows[:, : len(words)]

        def failure(text: str, ranks: List[int]) -> StreamError:
            more = f" (ranks {ranks} failed)" if len(ranks) > 1 else ""
            return StreamError(f"step {step}: {text}{more}", ranks=ranks, step=step, kind="StreamFailed")

        raise_failed(failed, texts, error, failure, own_if_all=False)
        if len(set(heads[:, 0].tolist())) > 1:
            raise InternalError(f"the ranks are at different steps: {heads[:, 0].tolist()}")
        # The key table grows by the new names of every rank, in one order everywhere.
        for name in sorted({n for t in texts for n in t.split("\n") if n} - set(table)):
            keys[name] = len(table)
            table.append(name)
        state["new_keys"] = [k for k in state["new_keys"] if k not in keys]
        if self.uneven == "error":
            counts = heads[:, 1]
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
        if bool(heads[:, 5].any()):  # a rank's metadata did not fit: every rank's again, padded to the longest
            longest = int((5 * heads[:, 1] + heads[:, 4]).max())
            mine = np.zeros(max(longest, 1), dtype=np.int64)
            mine[: meta.shape[0]] = meta
            more = torch.stack(self._all_gather(torch.from_numpy(mine), step, "metadata round")).numpy()
            rows = np.concatenate([rows[:, : len(words)], more], axis=1)
        base = len(words)
        per_rank = []
        for r in range(self.ranks):
            n, m = int(heads[r, 1]), int(heads[r, 4])
            per_rank.append((rows[r, base : base + 5 * n].reshape(n, 5), rows[r, base + 5 * n : base + 5 * n + m]))
        return heads, per_rank

    # --- one step -----------------------------------------------------------

    def _plan(self, gathered: List[List[Tuple[np.ndarray, np.ndarray]]]) -> Plan:
        """Plans the step from every read's gathered metadata (``gathered[read][rank]``), rank by rank in
        the order each rank read its samples (the order the metadata round of old had)."""
        meta = np.concatenate([g[r][0] for r in range(self.ranks) for g in gathered])
        values = np.concatenate([g[r][1] for r in range(self.ranks) for g in gathered])
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
    ) -> Tuple[List[List[Dict[str, torch.Tensor]]], int, int]:
        """Sends this rank's moving samples, receives the ones it is planned and builds its micro-batches:
        ``(batches, bytes sent, bytes received)``. Every rank then confirms (one status round) that it
        encoded and decoded everything, or every rank raises. Adds the seconds of ``"encode"``,
        ``"transfer"``, ``"decode"`` (with building the micro-batches) and ``"confirm"`` to ``timings``."""
        t0 = time.perf_counter()
        import torch.distributed as dist

        ex = plan.exchange
        if ex is None:  # every sample has an origin, so the plan has an exchange
            raise InternalError("the plan of a stream step has no exchange")
        moves = ex.moves
        src = moves.src.astype(np.int64)
        dst = moves.dst.astype(np.int64)
        mids = moves.ids.astype(np.int64)
        nbytes = moves.bytes.astype(np.int64)
        out_mask = src == self.rank
        in_mask = dst == self.rank
        send_sizes = np.bincount(dst[out_mask], weights=nbytes[out_mask], minlength=self.ranks).astype(np.int64)
        recv_sizes = np.bincount(src[in_mask], weights=nbytes[in_mask], minlength=self.ranks).astype(np.int64)
        sent, got = int(send_sizes.sum()), int(recv_sizes.sum())
        local = {s.id: s.sample for s in cur}
        error: Optional[BaseException] = None
        message = ""
        try:
            # Moves are sorted by (source, destination, id): this rank's are one run, by destination then id.
            chunks: List[List[Tuple[int, Mapping[str, torch.Tensor]]]] = [[] for _ in range(self.ranks)]
            for i, d in zip(mids[out_mask].tolist(), dst[out_mask].tolist()):
                chunks[d].append((i, local[i]))
            if self._send.numel() < sent:  # the send buffer, reused; a quarter more, so it rarely grows
                self._send = torch.empty(sent + sent // 4, dtype=torch.uint8)
            payload = _encode(chunks, keys, sent, self.device, out=self._send)
        except Exception as e:  # the all-to-all still runs (zeros), so that no rank waits in it; reported below
            error, message = e, failure_text(e, f"rank {self.rank} could not encode the samples it sends: ")
            payload = torch.zeros(sent, dtype=torch.uint8, device=self.device)
        received = torch.empty(got, dtype=torch.uint8, device=self.device)
        t1 = time.perf_counter()
        self._collective(
            lambda: dist.all_to_all_single(
                received, payload, recv_sizes.tolist(), send_sizes.tolist(), group=self.group, async_op=True
            ),
            step,
            "exchange",
        )
        t2 = time.perf_counter()
        batches: List[List[Dict[str, torch.Tensor]]] = []
        if error is None:
            try:
                on_cpu = received.device.type == "cpu"
                host = received if on_cpu else received.cpu()  # the headers are read on the CPU
                in_src, in_ids = src[in_mask], mids[in_mask]
                off = 0
                for r in range(self.ranks):
                    n = int(recv_sizes[r])
                    if n:
                        expected = in_ids[in_src == r].tolist()
                        chunk = None if on_cpu else received[off : off + n]
                        local.update(_decode(host[off : off + n], chunk, expected, table, r))
                    off += n
                batches = [[local[i] for i in plan.micro_batch(self.rank, j).tolist()] for j in range(plan.micro_steps)]
            except Exception as e:
                error, message = e, failure_text(e, f"rank {self.rank} could not decode what it received: ")
        t3 = time.perf_counter()
        _, failed, texts = self._status(step, "confirm round", [], error, message)

        def failure(text: str, ranks: List[int]) -> StreamError:
            more = f" (ranks {ranks} failed)" if len(ranks) > 1 else ""
            return StreamError(
                f"step {step}: {text}{more}: the step is not yielded on any rank", ranks=ranks, step=step, kind="Exchange"
            )

        raise_failed(failed, texts, error, failure, own_if_all=False)
        timings.update(encode=t1 - t0, transfer=t2 - t1, decode=t3 - t2, confirm=time.perf_counter() - t3)
        return batches, sent, got

    def _check(self, step: int, plan: Optional[Plan], error: Optional[BaseException]) -> None:
        """The fingerprint round: every rank's planning status and plan fingerprint. Raises on every rank on a
        failure or a difference."""
        fp = 0 if plan is None else int(np.array(plan.fingerprint, dtype=np.uint64).view(np.int64))
        message = "" if error is None else failure_text(error, "planning failed: ")
        rows, failed, texts = self._status(step, "fingerprint round", [fp], error, message)

        def failure(text: str, ranks: List[int]) -> StreamError:
            return StreamError(
                f"step {step}: {text} (on ranks {ranks} of {self.ranks}; every rank plans the same gathered "
                "metadata, so their planners differ: build every rank's BalancedStream with the same settings)",
                ranks=ranks,
                step=step,
                kind="StreamFailed",
            )

        # Every rank failed alike: the planner's own error (the same everywhere), e.g. an OversizeError.
        raise_failed(failed, texts, error, failure, own_if_all=True)
        differ = [r for r in range(self.ranks) if rows[r, 0] != rows[0, 0]]
        if differ:
            r = differ[0]
            a, b = (int(np.array(rows[i, 0], dtype=np.int64).view(np.uint64)) for i in (0, r))
            raise PlanMismatchError(
                f"step {step}: the plans differ between ranks (ranks {differ} differ from rank 0; rank {r} has "
                f"fingerprint {b:#018x} where rank 0 has {a:#018x}): every rank must build its BalancedStream "
                "with the same planner settings",
                ranks=differ,
            )

    def __iter__(self) -> Iterator[StreamStep]:
        """Yields this rank's steps; every rank must iterate in step (see the class)."""
        t0 = time.perf_counter()
        error: Optional[BaseException] = None
        try:
            it = iter(self.samples)
        except Exception as e:  # reported to every rank in the settings round
            error = e
        said = "" if error is None else failure_text(error, f"rank {self.rank}'s samples cannot be iterated: ")
        self._agree(error, said)
        state: Dict[str, Any] = {"ended": False, "failed": False, "read": 0, "new_keys": []}
        keys: Dict[str, int] = {}
        table: List[str] = []
        R = self.ranks
        step = 0
        t_read, t_gather = 0.0, time.perf_counter() - t0
        Gathered = List[List[Tuple[np.ndarray, np.ndarray]]]  # per read, per rank: metadata rows, image tokens

        def read(pulled: List[_Local], metas: Gathered) -> Tuple[np.ndarray, np.ndarray]:
            """Reads the next samples into ``pulled`` and every rank's metadata of them into ``metas``;
            returns every rank's (new samples, new images) and the headers."""
            nonlocal t_read, t_gather
            t0 = time.perf_counter()
            got, error, message = self._read(it, state, keys)
            t1 = time.perf_counter()
            pulled.extend(got)
            heads, per_rank = self._header(step, got, state, error, message, keys, table)
            metas.append(per_rank)
            t_read += t1 - t0
            t_gather += time.perf_counter() - t1
            return heads[:, [1, 4]].copy(), heads

        cur: List[_Local] = []
        nxt: List[_Local] = []
        cur_m: Gathered = []
        nxt_m: Gathered = []
        cur_n, _ = read(cur, cur_m)
        nxt_n, heads = read(nxt, nxt_m)
        while True:
            # Fold the read-ahead into this step while this step is too small to plan, or while the
            # read-ahead is the epoch's tail (every stream has ended) and too small to stand alone.
            while True:
                tc, tn = int(cur_n[:, 0].sum()), int(nxt_n[:, 0].sum())
                if tn > 0 and (tc < R or (tn < R and bool(heads[:, 2].all()))):
                    cur.extend(nxt)
                    cur_m.extend(nxt_m)
                    nxt, nxt_m = [], []
                    cur_n = cur_n + nxt_n
                    nxt_n, heads = read(nxt, nxt_m)
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
            error = None
            plan: Optional[Plan] = None
            t2 = time.perf_counter()
            try:
                plan = self._plan(cur_m)
            except Exception as e:
                error = e
            t3 = time.perf_counter()
            self._check(step, plan, error)
            if plan is None:  # unreachable: _check raised
                raise InternalError("a failed plan passed the fingerprint round")
            timings = {"read": t_read, "gather": t_gather, "plan": t3 - t2, "check": time.perf_counter() - t3}
            batches, sent, got = self._exchange(step, plan, cur, keys, table, timings)
            timings["exchange"] = time.perf_counter() - t3
            result = StreamStep(step, self.rank, plan, batches, sent, got, timings)
            del batches
            cur, cur_n, cur_m = nxt, nxt_n, nxt_m
            nxt, nxt_m = [], []
            step += 1
            t_read = t_gather = 0.0
            yield result
            del result
            nxt_n, heads = read(nxt, nxt_m)

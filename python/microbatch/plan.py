"""The planner: one optimizer step's samples to a balanced, gradient-invariant plan over ranks and micro-steps.

See :class:`Planner`, :class:`Plan` and the trainer's contract in the package
documentation (``microbatch.__doc__``).
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from typing import Any, List, Optional, Tuple, Union

import numpy as np

from . import _arrays, _native
from .cost import CostModel, Costs, _costs, _sample_arrays
from .errors import DtypeError, InvalidValueError, SettingError

__all__ = [
    "Planner",
    "Plan",
    "Report",
    "Loss",
    "Exchange",
    "Moves",
    "SYNC_MODELS",
    "NORMALIZATIONS",
    "REDUCTIONS",
    "GROUP_SCOPES",
]

# The names below are read from the Rust crate (each enum's ``NAMES``), which
# also parses them: an unknown name is a SettingError naming the setting.

#: The sync models: one barrier per step (DDP with ``no_sync``), per micro-step
#: (FSDP / ZeRO-3), per phase (FSDP with the vision encoder and the language
#: model gathered separately): ``("step", "micro-step", "phase")``.
SYNC_MODELS: Tuple[str, ...] = tuple(_native.SYNC_MODEL_NAMES)
#: The loss normalizations: the mean over the step's loss tokens, or over its
#: samples: ``("token", "sample")``.
NORMALIZATIONS: Tuple[str, ...] = tuple(_native.NORMALIZATION_NAMES)
#: How the ranks' gradients are combined: summed, or averaged (DDP's
#: default): ``("sum", "mean")``.
REDUCTIONS: Tuple[str, ...] = tuple(_native.REDUCTION_NAMES)
#: Where the samples of one group stay together: in one micro-batch, or on one
#: rank: ``("micro-batch", "rank")``.
GROUP_SCOPES: Tuple[str, ...] = tuple(_native.GROUP_SCOPE_NAMES)


@dataclasses.dataclass(frozen=True)
class Report:
    """What the planner predicts for a plan, against the lower bound, the naive plan and what users run.

    Times are in the cost model's unit (FLOPs for the presets, seconds for
    measured costs).

    Attributes:
        sync: the sync model the times are computed for.
        predicted: the plan's predicted step time.
        lower_bound: a lower bound of any plan's step time.
        baseline: the predicted step time of the naive plan (the loader's
            order, packed greedily, dealt to ranks in turn).
        baseline_micro_steps: the micro-steps the naive plan needs.
        users_baseline: the predicted step time of what users run without
            the planner, in the plan's ranks x micro-steps: the samples in
            ascending id (a group as one unit at its smallest id) dealt as
            ``DistributedSampler`` does (unit ``k`` to rank ``k % R``), each
            rank's units cut in order into micro-batches of
            ``ceil(units / (R * A))``, each packed by first fit in order. A
            micro-batch needing more than the plan's sequences a micro-step
            runs them all, so this may be below ``lower_bound``.
        imbalance_vision: the largest rank's vision time over the mean (1.0 is perfect).
        imbalance_language: the same for the language model.
        efficiency: real tokens over the token capacity of the non-empty sequences.
        sequences: the non-empty packed sequences.
        balanced_packing: whether the balanced packing fitted (``False``:
            first-fit-decreasing packed instead).
        planning_time: seconds spent planning, measured in Rust.
        ratio: ``predicted / lower_bound`` (1.0 is perfect).
        gain: ``users_baseline / predicted``: the speed-up over what users run.
        packed_gain: ``baseline / predicted``: the speed-up over the naive plan.
        straggler: ``predicted - lower_bound``.
        samples_moved: the samples with an origin planned on another rank
            (``None`` when no sample has an origin; so are the traffic fields below).
        bytes_moved: the bytes those samples take to move.
        bytes_total: the bytes of all samples with an origin.
        max_bytes_in: the most bytes any rank receives (with
            :attr:`max_bytes_out`, the all-to-all's critical path).
        max_bytes_out: the most bytes any rank sends.
        inter_node_bytes: the bytes moved between nodes (with ``ranks_per_node``).
        locality_free: the predicted step time of the plan without locality
            (with ``locality``; ``None`` otherwise).

    Example:

    >>> import microbatch
    >>> plan = microbatch.Planner("qwen2.5-vl-7b", ranks=2, seq_len=4096).plan(
    ...     ids=[0, 1, 2, 3], text_tokens=[300, 200, 500, 100])
    >>> r = plan.report
    >>> r.predicted >= r.lower_bound and r.ratio >= 1.0
    True
    """

    sync: str
    predicted: float
    lower_bound: float
    baseline: float
    baseline_micro_steps: int
    users_baseline: float
    imbalance_vision: float
    imbalance_language: float
    efficiency: float
    sequences: int
    balanced_packing: bool
    planning_time: Optional[float]
    ratio: float
    gain: float
    packed_gain: float
    straggler: float
    samples_moved: Optional[int] = None
    bytes_moved: Optional[int] = None
    bytes_total: Optional[int] = None
    max_bytes_in: Optional[int] = None
    max_bytes_out: Optional[int] = None
    inter_node_bytes: Optional[int] = None
    locality_free: Optional[float] = None


@dataclasses.dataclass(frozen=True)
class Loss:
    """The step-global loss denominators of a plan.

    Attributes:
        loss_tokens: the loss tokens of the whole step.
        samples: the samples of the whole step (those without loss tokens included).
        ranks: the data-parallel ranks.

    Example:

    >>> import microbatch
    >>> plan = microbatch.Planner("qwen2.5-vl-7b", ranks=2, seq_len=4096).plan(
    ...     ids=[0, 1, 2], text_tokens=[30, 20, 50], loss_tokens=[10, 0, 5])
    >>> plan.loss
    Loss(loss_tokens=15, samples=3, ranks=2)
    """

    loss_tokens: int
    samples: int
    ranks: int


@dataclasses.dataclass(frozen=True)
class Moves:
    """The samples that change rank, as four arrays of one entry a move, sorted
    by (source, destination, id).

    Attributes:
        ids: the sample ids (``uint64``).
        src: the rank that holds each sample (its origin, ``uint64``).
        dst: the rank it is planned on (``uint64``).
        bytes: the bytes it takes to move (``uint64``).
    """

    ids: np.ndarray
    src: np.ndarray
    dst: np.ndarray
    bytes: np.ndarray

    def __len__(self) -> int:
        return int(self.ids.shape[0])


class Exchange:
    """The all-to-all a plan needs: which samples each rank sends to which.

    Only samples with an origin (``origins=`` of :meth:`Planner.plan`) are
    in it, and only those planned on another rank. Memory follows the moves,
    never ``ranks ** 2``.

    Example:

    >>> import microbatch
    >>> plan = microbatch.Planner("qwen2.5-vl-7b", ranks=2, seq_len=4096).plan(
    ...     ids=[0, 1, 2, 3], text_tokens=[300, 200, 500, 100], origins=[0, 0, 0, 0])
    >>> ex = plan.exchange
    >>> int(ex.sent[0]) == len(ex) == int(ex.received[1])
    True
    >>> sorted(int(i) for i in ex.sends(0, 1)) == sorted(int(i) for i in plan.rank(1))
    True
    """

    __slots__ = ("_native", "_ranks", "_cache")

    def __init__(self, native: Any, ranks: int) -> None:
        self._native = native
        self._ranks = ranks
        self._cache: dict = {}

    def __len__(self) -> int:
        """The samples that move."""
        return len(self._native)

    def sends(self, src: int, dst: int) -> np.ndarray:
        """The ids (``uint64``, ascending) rank ``src`` sends to rank ``dst``.

        Raises :class:`IndexError` when a rank is out of range.
        """
        for r in (src, dst):
            if not 0 <= r < self._ranks:
                raise IndexError(f"rank {r} is out of range: the plan has {self._ranks} ranks")
        return self._native.sends(src, dst)

    def _get(self, name: str) -> Any:
        if name not in self._cache:
            self._cache[name] = getattr(self._native, name)()
        return self._cache[name]

    @property
    def sent(self) -> np.ndarray:
        """The samples each rank sends (``uint64``, one entry a rank)."""
        return self._get("sent")

    @property
    def received(self) -> np.ndarray:
        """The samples each rank receives (``uint64``, one entry a rank)."""
        return self._get("received")

    @property
    def bytes_out(self) -> np.ndarray:
        """The bytes each rank sends (``uint64``, one entry a rank)."""
        return self._get("bytes_out")

    @property
    def bytes_in(self) -> np.ndarray:
        """The bytes each rank receives (``uint64``, one entry a rank)."""
        return self._get("bytes_in")

    @property
    def moves(self) -> Moves:
        """Every move, as arrays sorted by (source, destination, id)."""
        if "moves" not in self._cache:
            self._cache["moves"] = Moves(*self._native.moves())
        return self._cache["moves"]

    def __repr__(self) -> str:
        return f"Exchange(ranks={self._ranks}, moves={len(self)}, bytes={int(self.bytes_out.sum())})"


class Plan:
    """One step's plan: for every rank and micro-step, the ids of its micro-batch.

    Every sample of the step appears exactly once; every rank runs the same
    :attr:`micro_steps` micro-steps (some micro-batches may be empty: run
    them anyway). Multiply each micro-batch's *summed* loss by
    :meth:`loss_scale` before backward.

    Example:

    >>> import microbatch
    >>> plan = microbatch.Planner("qwen2.5-vl-7b", ranks=2, seq_len=4096).plan(
    ...     ids=[10, 11, 12, 13], text_tokens=[300, 200, 500, 100],
    ...     image_tokens=[[576], [], [256, 256], []])
    >>> sorted(int(i) for r in range(plan.ranks) for s in range(plan.micro_steps)
    ...        for i in plan.micro_batch(r, s))
    [10, 11, 12, 13]
    """

    __slots__ = ("_native", "_report", "_exchange")

    def __init__(self, native: Any) -> None:
        self._native = native
        self._report: Optional[Report] = None
        self._exchange: Optional[Exchange] = None

    @property
    def ranks(self) -> int:
        """The data-parallel ranks."""
        return self._native.ranks

    @property
    def micro_steps(self) -> int:
        """The micro-steps every rank runs (gradient accumulation steps)."""
        return self._native.micro_steps

    @property
    def sequences_per_micro_step(self) -> int:
        """The packed sequences in one micro-batch."""
        return self._native.sequences_per_micro_step

    def __len__(self) -> int:
        """The samples of the step."""
        return len(self._native)

    def micro_batch(self, rank: int, micro_step: int) -> np.ndarray:
        """The sample ids (``uint64``) of one micro-batch, sequence by sequence.

        Raises :class:`IndexError` when ``rank`` or ``micro_step`` is out of range.
        """
        return self._native.micro_batch(rank, micro_step)

    def sequences(self, rank: int, micro_step: int) -> List[np.ndarray]:
        """The packed sequences of one micro-batch, each an array of sample ids (``uint64``)."""
        return self._native.sequences(rank, micro_step)

    def rank(self, rank: int) -> np.ndarray:
        """The sample ids (``uint64``) of one rank, micro-step by micro-step.

        Raises :class:`IndexError` when ``rank`` is out of range.
        """
        if not 0 <= rank < self.ranks:
            raise IndexError(f"rank {rank} is out of range: the plan has {self.ranks} ranks")
        parts = [self.micro_batch(rank, j) for j in range(self.micro_steps)]
        return np.concatenate(parts) if parts else np.zeros(0, dtype=np.uint64)

    @property
    def exchange(self) -> Optional[Exchange]:
        """The samples to ship before the step (an :class:`Exchange`), or ``None``
        when no sample has an origin."""
        if self._exchange is None:
            native = self._native.exchange()
            if native is None:
                return None
            self._exchange = Exchange(native, self.ranks)
        return self._exchange

    @property
    def loss(self) -> Loss:
        """The step-global denominators."""
        return Loss(*self._native.loss())

    def loss_scale(self, normalization: str, reduction: str) -> float:
        """The factor every micro-batch's *summed* loss is multiplied by before backward.

        ``normalization``: ``"token"`` (the mean over the step's loss tokens)
        or ``"sample"`` (the mean over its samples of each sample's mean).
        ``reduction``: ``"mean"`` when the gradients are averaged over ranks
        (DDP's default), ``"sum"`` when summed. ``1 / D`` for ``"sum"``,
        ``ranks / D`` for ``"mean"``, 0 for a step without loss tokens.

        >>> import microbatch
        >>> plan = microbatch.Planner("qwen2.5-vl-7b", ranks=2, seq_len=4096).plan(
        ...     ids=[0, 1], text_tokens=[30, 20], loss_tokens=[10, 15])
        >>> plan.loss_scale("token", "mean")
        0.08
        """
        return self._native.loss_scale(normalization, reduction)

    @property
    def report(self) -> Report:
        """The predicted step time against the lower bound and the naive plan."""
        if self._report is None:
            self._report = Report(**self._native.report())
        return self._report

    @property
    def fingerprint(self) -> int:
        """A stable 64-bit hash of the plan: equal on every rank that planned the same step."""
        return self._native.fingerprint

    def to_json(self) -> str:
        """The plan as a JSON document (ids as exact integers: parsers that read
        numbers as doubles, JavaScript's among them, lose ids above 2**53)."""
        return self._native.to_json()

    @classmethod
    def from_json(cls, text: str) -> "Plan":
        """Reads a plan written by :meth:`to_json`, checking it (a document that
        is not a plan raises :class:`microbatch.InputError`; an argument that
        is not a ``str`` raises :class:`microbatch.DtypeError`).

        >>> from microbatch import Plan
        >>> try:
        ...     Plan.from_json({"ranks": 2})
        ... except TypeError as e:  # a microbatch.DtypeError, which is a TypeError
        ...     print(type(e).__name__, e.item)
        DtypeError text
        """
        if not isinstance(text, str):
            raise DtypeError(
                f"Plan.from_json reads the JSON text of a plan (a str, as Plan.to_json writes it), got "
                f"{type(text).__name__}: pass json.dumps(obj) for a parsed document, or .decode() bytes",
                item="text",
            )
        return cls(_native.Plan.from_json(text))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Plan):
            return NotImplemented
        return self.to_json() == other.to_json()

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return (
            f"Plan(ranks={self.ranks}, micro_steps={self.micro_steps}, samples={len(self)}, "
            f"fingerprint={self.fingerprint:#018x})"
        )


class Planner:
    """Plans optimizer steps: balanced micro-batches over ranks and micro-steps.

    Args:
        model: a cost model preset name (``"llava-1.5-7b"``, ``"qwen2.5-vl-7b"``,
            ``"internvl2.5-8b"``), ``"costs"`` (bring your own costs: the
            :class:`microbatch.cost.Given` model, ``costs=`` required by
            :meth:`plan`), or a model of :mod:`microbatch.cost`. Every model
            plans as the crate's type-erased model (``BoxCostModel``), a
            composition as built by the crate's combinators.
        ranks: the data-parallel ranks (``R``).
        seq_len: the packed sequence length in tokens (``L``).
        sync: ``"phase"`` (FSDP/ZeRO-3 with the vision encoder and the LLM
            gathered separately), ``"micro-step"`` (FSDP/ZeRO-3) or ``"step"``
            (DDP with ``no_sync`` during accumulation).
        micro_steps: the micro-steps per step (``A``); ``None``: the fewest
            that fit the batch.
        fastest_micro_steps: with ``micro_steps=None``, plan with every number
            of micro-steps from the fewest up to this one and keep the plan of
            least predicted step time (ties to fewer). Worth it with attention
            over the packed row (``language.row_attention``: sdpa and eager
            attention), where shorter rows in more micro-steps can be faster
            despite a cost per row; the model does not see a cost per
            micro-step of the trainer, so allow only what you would run.
            Planning takes up to that many plans' time.
        max_units: at most this many vision units (tiles) per sequence.
        max_images: at most this many images per sequence.
        sequences_per_micro_step: packed sequences in one micro-batch (``S``).
        refinement: whether to refine the plan by moving and swapping samples.
        locality: a tolerance (a fraction: ``0.005`` is 0.5%): keep samples on
            their origin rank (``origins=`` of :meth:`plan`) where the step
            time stays within ``(1 + locality)`` times the plan without
            locality; ``None``: no locality (the plan still says, in
            :attr:`Plan.exchange`, what moves).
        ranks_per_node: with ``locality``, the ranks of one node: moves inside
            a node count as cheap, moves across nodes as expensive.
        locality_effort: with ``locality``, a bound on the work of its
            exchange step under ``sync="micro-step"`` and ``"phase"`` (not
            ``"step"``): at most ``locality_effort * n / 8`` re-splits for
            ``n`` samples (``8``: one a sample on average, ``0``: none), the
            samples of most bytes first; ``None`` (the default): no bound. It
            trades bytes moved for planning time (measured in
            ``BENCHMARKS.md``, "Locality"). Counted work, not time: the plan
            stays a pure function of the inputs.
        group_scope: where the samples of one group (``groups=`` of
            :meth:`plan`) stay together: ``"micro-batch"`` or ``"rank"``.
        search_effort: how long the planner searches (counted work, not
            time: the plan stays a pure function of the inputs); ``None``: the
            crate's default (45), ``0``: no pairing and no search. Larger
            values search longer on large batches, for plans nearer the
            lower bound.

    The plan is a pure function of the step's samples (as a set keyed by id)
    and these settings: every rank planning the same step gets the same plan,
    with no communication.

    Example:

    >>> import numpy as np, microbatch
    >>> planner = microbatch.Planner("qwen2.5-vl-7b", ranks=4, seq_len=8192, sync="phase")
    >>> ids = np.arange(64)
    >>> text = 100 + (ids * 37) % 900
    >>> images = [np.full(i % 3, 256) for i in range(64)]
    >>> plan = planner.plan(ids, text, images)
    >>> plan.ranks, len(plan)
    (4, 64)
    """

    __slots__ = (
        "_native", "model", "ranks", "seq_len", "sync", "locality", "ranks_per_node", "locality_effort", "group_scope"
    )

    def __init__(
        self,
        model: Union[str, Any],
        ranks: int,
        seq_len: int,
        *,
        sync: str = "phase",
        micro_steps: Optional[int] = None,
        fastest_micro_steps: Optional[int] = None,
        max_units: Optional[int] = None,
        max_images: Optional[int] = None,
        sequences_per_micro_step: int = 1,
        refinement: bool = True,
        locality: Optional[float] = None,
        ranks_per_node: Optional[int] = None,
        group_scope: str = "micro-batch",
        search_effort: Optional[int] = None,
        locality_effort: Optional[int] = None,
    ) -> None:
        if isinstance(model, CostModel):
            native_model: Any = model._native
        elif isinstance(model, str):
            native_model = model
        else:
            raise DtypeError(
                f"model must be a preset name, 'costs' or a microbatch.cost model, got {type(model).__name__}",
                item="model",
            )
        self.model = model
        self.ranks = _arrays.count(ranks, "ranks")
        self.seq_len = _arrays.count(seq_len, "seq_len", maximum=2**32 - 1)
        self.sync = sync
        self.locality = None if locality is None else _tolerance(locality)
        self.ranks_per_node = _of_locality(
            ranks_per_node, "ranks_per_node", "weighs the moves of locality", locality, minimum=1
        )
        self.locality_effort = _of_locality(
            locality_effort, "locality_effort", "bounds the work of locality", locality, maximum=2**32 - 1
        )
        self.group_scope = group_scope
        if micro_steps is not None and fastest_micro_steps is not None:
            raise SettingError(
                "micro_steps fixes the number of micro-steps and fastest_micro_steps chooses it: give one",
                item="fastest_micro_steps",
            )
        self._native = _native.Planner(
            native_model,
            self.ranks,
            self.seq_len,
            sync,
            None if micro_steps is None else _arrays.count(micro_steps, "micro_steps"),
            None if fastest_micro_steps is None else _arrays.count(fastest_micro_steps, "fastest_micro_steps"),
            None if max_units is None else _arrays.count(max_units, "max_units", maximum=2**32 - 1),
            None if max_images is None else _arrays.count(max_images, "max_images", maximum=2**32 - 1),
            _arrays.count(sequences_per_micro_step, "sequences_per_micro_step"),
            bool(refinement),
            self.locality,
            self.ranks_per_node,
            self.group_scope,
            None if search_effort is None else _arrays.count(search_effort, "search_effort", maximum=2**32 - 1),
            self.locality_effort,
        )

    def plan(
        self,
        ids: Any,
        text_tokens: Any,
        image_tokens: _arrays.Ragged = None,
        loss_tokens: Any = None,
        *,
        image_units: _arrays.Ragged = None,
        costs: Costs = None,
        origins: Any = None,
        groups: Any = None,
        bytes: Any = None,
    ) -> Plan:
        """Plans one step.

        Args:
            ids: the samples' ids (non-negative integers, unique), 1-D.
            text_tokens: each sample's text tokens, 1-D, one per sample.
            image_tokens: each sample's images as their token counts: a list of
                1-D arrays (one per sample, empty for none), or a tuple
                ``(values, offsets)`` of all images flattened with ``n + 1``
                offsets (the fast form), or ``None`` for no images.
            loss_tokens: each sample's tokens that carry loss (after label
                shifting); ``None``: all its text tokens.
            image_units: the vision units (tiles) of each image, in the same
                form as ``image_tokens``; ``None``: 1 per image.
            costs: each sample's own cost, for the ``Given`` model only (and
                required by it): an ``(n, 2)`` array of (vision, language), or
                a dict ``{"vision": a, "language": b}`` of 1-D arrays (a
                missing phase costs 0). Finite and non-negative.
            origins: the rank whose data loader holds each sample, 1-D, one per
                sample, ``-1`` for a sample held nowhere yet; with origins the
                plan has an :attr:`Plan.exchange`, and ``locality`` keeps
                samples home.
            groups: each sample's group id, 1-D, ``-1`` for none: the samples
                of one group stay together (``group_scope``).
            bytes: the bytes to move each sample, 1-D; ``None``: 2,352 per
                image token (its RGB pixels), 0 for text.

        Raises:
            DtypeError: an argument of the wrong dtype or length.
            InvalidValueError: a negative value, a count past ``uint32``,
                loss tokens above the sample's tokens, a NaN, infinite or
                negative cost, an origin not below ``ranks`` (``item``: the
                sample's id), an origin or group below ``-1`` (``item``: its index).
            DuplicateIdError: two samples with one id.
            OversizeError: a sample longer than ``seq_len`` or the caps, a
                group that fits no sequence (``item``: the group id).
            SettingError, InfeasibleError: settings that do not work for this
                batch; ``costs`` missing for ``Given`` or given to another model.

        Example (bring your own costs):

        >>> import numpy as np, microbatch
        >>> planner = microbatch.Planner("costs", ranks=2, seq_len=4096, sync="step")
        >>> plan = planner.plan(ids=[0, 1, 2, 3], text_tokens=[100, 100, 100, 100],
        ...                     costs={"language": [4.0, 3.0, 2.0, 1.0]})
        >>> plan.report.predicted
        5.0
        """
        return Plan(
            self._native.plan(
                *self._arguments(ids, text_tokens, image_tokens, loss_tokens, image_units, costs),
                *_placement(origins, groups, bytes, _count(ids)),
                baseline=False,
            )
        )

    def baseline(
        self,
        ids: Any,
        text_tokens: Any,
        image_tokens: _arrays.Ragged = None,
        loss_tokens: Any = None,
        *,
        image_units: _arrays.Ragged = None,
        costs: Costs = None,
        origins: Any = None,
        groups: Any = None,
        bytes: Any = None,
    ) -> Plan:
        """The naive plan of the same step (the loader's order, packed greedily,
        dealt to ranks in turn), with the same arguments as :meth:`plan`: what
        the report's ``baseline`` predicts.

        >>> import microbatch
        >>> planner = microbatch.Planner("qwen2.5-vl-7b", ranks=2, seq_len=4096)
        >>> args = dict(ids=[0, 1, 2, 3], text_tokens=[3000, 200, 2500, 100])
        >>> naive, plan = planner.baseline(**args), planner.plan(**args)
        >>> bool(naive.report.predicted >= plan.report.predicted)
        True
        """
        return Plan(
            self._native.plan(
                *self._arguments(ids, text_tokens, image_tokens, loss_tokens, image_units, costs),
                *_placement(origins, groups, bytes, _count(ids)),
                baseline=True,
            )
        )

    def _arguments(
        self,
        ids: Any,
        text_tokens: Any,
        image_tokens: _arrays.Ragged,
        loss_tokens: Any,
        image_units: _arrays.Ragged,
        costs: Costs,
    ) -> Tuple[
        np.ndarray, np.ndarray, np.ndarray, Optional[np.ndarray], np.ndarray, Optional[np.ndarray], Optional[np.ndarray]
    ]:
        ids_a = _arrays.integers(ids, "ids", np.uint64)
        n = ids_a.shape[0]
        text, img, units, offsets = _sample_arrays(text_tokens, image_tokens, image_units, n)
        loss = None if loss_tokens is None else _arrays.integers(loss_tokens, "loss_tokens", np.uint64, length=n)
        return ids_a, text, img, units, offsets, loss, _costs(_cost_values(costs), n)

    def __repr__(self) -> str:
        extra = ""
        if self.locality is not None:
            extra += f", locality={self.locality!r}"
        if self.ranks_per_node is not None:
            extra += f", ranks_per_node={self.ranks_per_node}"
        if self.locality_effort is not None:
            extra += f", locality_effort={self.locality_effort}"
        if self.group_scope != "micro-batch":
            extra += f", group_scope={self.group_scope!r}"
        return f"Planner({self.model!r}, ranks={self.ranks}, seq_len={self.seq_len}, sync={self.sync!r}{extra})"


def _of_locality(value: Any, name: str, what: str, locality: Any, **bounds: int) -> Optional[int]:
    """A count that only locality reads (``ranks_per_node``, ``locality_effort``): ``None``, or
    the count within ``bounds``, given with ``locality`` (a :class:`SettingError` without)."""
    if value is None:
        return None
    if locality is None:
        raise SettingError(
            f"{name} {what}: give locality= too (locality=0.0 keeps the step time of the plan without locality)",
            item=name,
        )
    return _arrays.count(value, name, **bounds)


def _tolerance(value: Any) -> float:
    """``locality``: a finite, non-negative fraction (a float or an int, not a bool)."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise DtypeError(
            f"locality must be a number (a fraction: 0.005 for 0.5%), got {type(value).__name__} {value!r}",
            item="locality",
        )
    v = float(value)
    if not (math.isfinite(v) and v >= 0.0):
        raise InvalidValueError(f"locality is {v}: it must be a finite fraction >= 0 (0.005 for 0.5%)", item="locality")
    return v


def _count(ids: Any) -> int:
    """The samples of ``ids`` (its checks come with the other arguments)."""
    return int(_arrays.array(ids, "ids").reshape(-1).shape[0])


def _cost_values(costs: Costs) -> Costs:
    """``costs=`` with its arrays read as values (tensors too: :func:`microbatch._arrays.array`);
    dtypes, shapes and keys are checked by :func:`microbatch.cost._costs`."""
    if costs is None:
        return None
    if isinstance(costs, dict):
        return {k: _arrays.array(v, f"costs[{k!r}]", integer=False, item="costs") for k, v in costs.items()}
    return _arrays.array(costs, "costs", integer=False)


def _optional_ids(x: Any, name: str, n: int) -> Tuple[Optional[np.ndarray], Optional[np.ndarray]]:
    """``origins`` or ``groups``: ``(values, present)`` as ``uint64`` and ``bool`` arrays;
    ``-1`` marks a sample without one (``present`` is ``None`` when every sample has one)."""
    if x is None:
        return None, None
    a = _arrays.array(x, name)
    if a.ndim == 1 and a.size and a.dtype.kind == "i":
        bad = np.flatnonzero(a < -1)
        if bad.size:
            i = int(bad[0])
            raise InvalidValueError(f"{name}[{i}] is {a[i]}: it must be non-negative, or -1 for none", item=i)
        present = a >= 0
        values = _arrays.integers(np.where(present, a, 0), name, np.uint64, length=n)
        return values, (None if bool(present.all()) else np.ascontiguousarray(present))
    return _arrays.integers(a, name, np.uint64, length=n), None


_Placement = Tuple[
    Optional[np.ndarray], Optional[np.ndarray], Optional[np.ndarray], Optional[np.ndarray], Optional[np.ndarray]
]


def _placement(origins: Any, groups: Any, bytes_: Any, n: int) -> _Placement:
    """The native arguments of ``origins=``, ``groups=`` and ``bytes=``."""
    o, o_present = _optional_ids(origins, "origins", n)
    g, g_present = _optional_ids(groups, "groups", n)
    b = None if bytes_ is None else _arrays.integers(bytes_, "bytes", np.uint64, length=n)
    return o, o_present, g, g_present, b

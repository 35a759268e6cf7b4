"""Cost models: how long a sample or a group of samples takes to train, per phase (vision, language).

The planner balances *time*. A model maps a group of samples (a packed
sequence, a micro-batch) to a cost in the vision encoder's phase and in the
language model's phase, in the model's unit (FLOPs for the presets, seconds for
fitted or measured costs). Models are built from the Rust crate's terms and
compose:

- terms: :class:`Tokens`, :class:`PerSample`, :class:`PerGroup`,
  :class:`DocumentAttention`, :class:`FullAttention`, the vision encoders
  :class:`PerTile`, :class:`PerImage` and :class:`Windowed`, the FLOPs presets
  :func:`preset` (names in :data:`PRESETS`);
- bring your own costs: :class:`Given`, the cost of each sample measured or
  estimated by you, passed as ``costs=`` (an ``(n, 2)`` array of vision and
  language costs, or a dict ``{"vision": a, "language": b}``);
- combinators: ``a + b``, ``a.scale(f)``, ``a.in_phase("vision")``, ``a.max(b)``;
- coefficients from measured timings: :func:`fit` once, or online with a
  :class:`Calibrator` that fits a :class:`Linear` model's terms (names in
  :data:`TERMS`) to measured micro-batch times as training runs.

Every constructor checks its coefficients: NaN, infinite or negative raises
:class:`~microbatch.errors.InvalidValueError` with ``item`` the parameter name.

Example:

>>> import microbatch.cost as mc
>>> model = mc.Tokens(2e-5) + mc.DocumentAttention(3e-10) + mc.PerSample(1e-3)
>>> costs = model.cost(text_tokens=[1000, 200], image_tokens=[[], [512]])
>>> costs.shape
(2, 2)
>>> round(float(costs[0, 1]), 6)  # language: 2e-5 * 1000 + 3e-10 * 1000**2 + 1e-3
0.0213
"""

from __future__ import annotations

import dataclasses
import numbers
from typing import Any, Dict, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

from . import _arrays, _native
from .errors import DtypeError, SettingError

__all__ = [
    "CostModel",
    "Tokens",
    "PerSample",
    "PerGroup",
    "DocumentAttention",
    "FullAttention",
    "PerTile",
    "PerImage",
    "Windowed",
    "Given",
    "Linear",
    "Calibrator",
    "Calibration",
    "Drift",
    "preset",
    "fit",
    "fit_terms",
    "Fit",
    "PRESETS",
    "PHASES",
    "TRAINING",
    "TERMS",
]

#: The FLOPs presets: named vision-language model pairs. Read from the Rust
#: crate (``Preset::NAMES``): ``("llava-1.5-7b", "qwen2.5-vl-7b", "internvl2.5-8b")``.
PRESETS: Tuple[str, ...] = tuple(_native.PRESET_NAMES)
#: The phases of a training step with their own barrier under FSDP/ZeRO-3:
#: ``("vision", "language")`` (the crate's ``Phase::NAMES``).
PHASES: Tuple[str, ...] = tuple(_native.PHASE_NAMES)
#: A vision encoder is frozen (forward only) or trained (forward + backward,
#: 3x): ``("frozen", "trained")`` (the crate's ``Training::NAMES``).
TRAINING: Tuple[str, ...] = tuple(_native.TRAINING_NAMES)
#: The terms of a :class:`Linear` model, each a feature of a group in one phase:
#: ``W``, ``P`` and ``T`` are positive integers written in the name
#: (``"vision.tiles(576)"``, ``"vision.window_attention(64,4)"``). Read from
#: the Rust crate (``Term::NAMES``), in its order, from
#: ``"vision.image_tokens"`` to ``"language.groups"``.
TERMS: Tuple[str, ...] = tuple(_native.TERM_NAMES)

Costs = Union[None, Any, Dict[str, Any]]


def _coefficient(value: Any, name: str) -> float:
    """A real number (Python or numpy), not a bool; the crate checks its range."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise DtypeError(f"{name} must be a real number, got {type(value).__name__} {value!r}", item=name)
    return float(value)


def _either(names: Tuple[str, ...], last: str = "or") -> str:
    """The crate's names for a message: ``'a', 'b' or 'c'``."""
    quoted = [repr(n) for n in names]
    return f"{', '.join(quoted[:-1])} {last} {quoted[-1]}" if len(quoted) > 1 else "".join(quoted)


def _sample_arrays(
    text_tokens: Any, image_tokens: _arrays.Ragged, image_units: _arrays.Ragged, n: Optional[int] = None
) -> Tuple[np.ndarray, np.ndarray, Optional[np.ndarray], np.ndarray]:
    """``(text, image_values, image_units or None, offsets)`` as the native module takes them."""
    text = _arrays.integers(text_tokens, "text_tokens", np.uint32, length=n)
    n = text.shape[0]
    img, offsets = _arrays.ragged(image_tokens, "image_tokens", n, np.uint32)
    units = None
    if image_units is not None:
        units, unit_offsets = _arrays.ragged(image_units, "image_units", n, np.uint32)
        if not np.array_equal(unit_offsets, offsets):
            raise DtypeError(
                "image_units must give one unit count per image, in the shape of image_tokens",
                item="image_units",
            )
    return text, img, units, offsets


def _costs(costs: Costs, n: int) -> Optional[np.ndarray]:
    """Per-sample costs as a C-contiguous ``(n, 2)`` float64 array (vision, language).

    Accepts ``None``, an ``(n, 2)`` array of numbers, or a dict with the keys
    ``"vision"`` and/or ``"language"`` (a missing phase costs 0). The values'
    range (NaN, infinite, negative) is checked by the crate, naming the sample.
    """
    if costs is None:
        return None
    if isinstance(costs, dict):
        unknown = sorted(set(costs) - set(PHASES), key=str)
        if unknown:
            raise DtypeError(
                f"costs has the key {unknown[0]!r}: use {_either(PHASES, 'and/or')}", item="costs"
            )
        out = np.zeros((n, 2), dtype=np.float64)
        for j, phase in enumerate(PHASES):
            if phase in costs:
                out[:, j] = _float_column(costs[phase], f"costs[{phase!r}]", n)
        return out
    a = _arrays.array(costs, "costs", integer=False)
    if a.dtype.kind not in "iuf" or a.dtype == np.bool_:
        raise DtypeError(f"costs must be an array of numbers, got dtype {a.dtype}", item="costs")
    if a.shape != (n, 2):
        raise DtypeError(
            f"costs must have shape ({n}, 2): (vision, language) per sample, got {a.shape}",
            item="costs",
        )
    return np.ascontiguousarray(a, dtype=np.float64)


def _float_column(x: Any, name: str, n: int) -> np.ndarray:
    a = _arrays.array(x, name, integer=False, item="costs")
    if a.dtype.kind not in "iuf" or a.dtype == np.bool_:
        raise DtypeError(f"{name} must be an array of numbers, got dtype {a.dtype}", item="costs")
    if a.shape != (n,):
        raise DtypeError(f"{name} must have shape ({n},): one cost per sample, got {a.shape}", item="costs")
    return a.astype(np.float64)


class CostModel:
    """A cost model: the cost of a group of samples per phase (vision, language).

    Build one from the terms of this module and combine them with ``+``,
    :meth:`scale`, :meth:`in_phase` and :meth:`max`; pass it to
    :class:`microbatch.Planner`. ``repr`` shows how it was built,
    :attr:`formula` the crate's formula.

    Example:

    >>> import microbatch.cost as mc
    >>> m = (mc.Tokens(1.0) + mc.PerGroup(5.0)).max(mc.PerSample(100.0))
    >>> m
    (Tokens(1.0) + PerGroup(5.0)).max(PerSample(100.0))
    >>> m.group_cost(text_tokens=[10, 20])  # max(30 + 5, 2 * 100) in the language phase
    (0.0, 200.0)
    """

    __slots__ = ("_native", "_repr")

    def __init__(self, native: Any, text: str) -> None:
        self._native = native
        self._repr = text

    @classmethod
    def _wrap(cls, native: Any, text: str) -> "CostModel":
        model = CostModel.__new__(CostModel)
        CostModel.__init__(model, native, text)
        return model

    def __add__(self, other: "CostModel") -> "CostModel":
        """The sum of two models, phase by phase."""
        if not isinstance(other, CostModel):
            return NotImplemented
        return CostModel._wrap(self._native.plus(other._native), f"{self._repr} + {other._repr}")

    def __radd__(self, other: Any) -> "CostModel":
        # ``sum(models)`` starts from 0.
        if isinstance(other, int) and not isinstance(other, bool) and other == 0:
            return self
        return NotImplemented

    def _operand(self) -> str:
        return f"({self._repr})" if " + " in self._repr else self._repr

    def scale(self, factor: float) -> "CostModel":
        """The model times ``factor`` (finite, non-negative), e.g. FLOPs to seconds.

        >>> import microbatch.cost as mc
        >>> mc.Tokens(2.0).scale(0.5).cost([10])[0].tolist()
        [0.0, 10.0]
        """
        f = _coefficient(factor, "factor")
        return CostModel._wrap(self._native.scale(f), f"{self._operand()}.scale({f!r})")

    def in_phase(self, phase: str) -> "CostModel":
        """The model's total cost moved into ``phase`` (``"vision"`` or ``"language"``).

        >>> import microbatch.cost as mc
        >>> mc.PerSample(1.0).in_phase("vision").cost([5])[0].tolist()
        [1.0, 0.0]
        """
        # The crate reads the name (an unknown one is a SettingError naming
        # ``phase`` and listing PHASES).
        return CostModel._wrap(self._native.in_phase(phase), f"{self._operand()}.in_phase({phase!r})")

    def max(self, other: "CostModel") -> "CostModel":
        """The phase-wise maximum of two models (work that overlaps).

        >>> import microbatch.cost as mc
        >>> mc.Tokens(1.0).max(mc.PerSample(50.0)).cost([10, 80])[:, 1].tolist()
        [50.0, 80.0]
        """
        if not isinstance(other, CostModel):
            raise DtypeError(f"max takes a cost model, got {type(other).__name__}", item="other")
        return CostModel._wrap(self._native.max(other._native), f"{self._operand()}.max({other._repr})")

    @property
    def formula(self) -> str:
        """The model as the Rust crate prints it (its ``Debug`` formula)."""
        return self._native.formula()

    @property
    def needs_costs(self) -> bool:
        """Whether the model reads given costs (it contains :class:`Given`): ``costs=`` is then required."""
        return self._native.needs_costs

    def cost(
        self,
        text_tokens: Any,
        image_tokens: _arrays.Ragged = None,
        *,
        image_units: _arrays.Ragged = None,
        costs: Costs = None,
    ) -> np.ndarray:
        """Each sample's own cost: an ``(n, 2)`` float64 array of (vision, language).

        Arguments as in :meth:`microbatch.Planner.plan`; ``costs`` only for
        models with :class:`Given`.

        >>> import microbatch.cost as mc
        >>> mc.Tokens(2.0).cost(text_tokens=[10], image_tokens=[[5]]).tolist()
        [[0.0, 30.0]]
        """
        text, img, units, offsets = _sample_arrays(text_tokens, image_tokens, image_units)
        return self._native.cost(text, img, units, offsets, _costs(costs, text.shape[0]))

    def group_cost(
        self,
        text_tokens: Any,
        image_tokens: _arrays.Ragged = None,
        *,
        image_units: _arrays.Ragged = None,
        costs: Costs = None,
    ) -> Tuple[float, float]:
        """The cost of all the samples as one group (one packed sequence): ``(vision, language)``.

        >>> import microbatch.cost as mc
        >>> mc.FullAttention(1.0).group_cost(text_tokens=[3, 4])  # (3 + 4) ** 2
        (0.0, 49.0)
        """
        text, img, units, offsets = _sample_arrays(text_tokens, image_tokens, image_units)
        return self._native.group_cost(text, img, units, offsets, _costs(costs, text.shape[0]))

    def __repr__(self) -> str:
        return self._repr


class Tokens(CostModel):
    """``per_token * sum(T)`` in the language phase, ``T`` a sample's text + image tokens.

    >>> import microbatch.cost as mc
    >>> mc.Tokens(2.0).cost([10]).tolist()
    [[0.0, 20.0]]
    """

    __slots__ = ()

    def __init__(self, per_token: float) -> None:
        c = _coefficient(per_token, "per_token")
        super().__init__(_native.CostModel.tokens(c), f"Tokens({c!r})")


class PerSample(CostModel):
    """``cost * n`` in the language phase for a group of ``n`` samples.

    >>> import microbatch.cost as mc
    >>> mc.PerSample(0.25).group_cost([1, 9])
    (0.0, 0.5)
    """

    __slots__ = ()

    def __init__(self, cost: float) -> None:
        c = _coefficient(cost, "cost")
        super().__init__(_native.CostModel.per_sample(c), f"PerSample({c!r})")


class PerGroup(CostModel):
    """``cost`` per non-empty group (packed sequence or micro-batch), in the language phase.

    >>> import microbatch.cost as mc
    >>> mc.PerGroup(5.0).group_cost([1, 2, 3])
    (0.0, 5.0)
    """

    __slots__ = ()

    def __init__(self, cost: float) -> None:
        c = _coefficient(cost, "cost")
        super().__init__(_native.CostModel.per_group(c), f"PerGroup({c!r})")


class DocumentAttention(CostModel):
    """``per_token_pair * sum(T**2)``: attention under a document mask, in the language phase.

    >>> import microbatch.cost as mc
    >>> mc.DocumentAttention(1.0).group_cost([3, 4])  # 9 + 16
    (0.0, 25.0)
    """

    __slots__ = ()

    def __init__(self, per_token_pair: float) -> None:
        c = _coefficient(per_token_pair, "per_token_pair")
        super().__init__(_native.CostModel.document_attention(c), f"DocumentAttention({c!r})")


class FullAttention(CostModel):
    """``per_token_pair * L**2`` over the packed length ``L`` of a group, in the language phase.

    >>> import microbatch.cost as mc
    >>> mc.FullAttention(1.0).group_cost([3, 4])
    (0.0, 49.0)
    """

    __slots__ = ()

    def __init__(self, per_token_pair: float) -> None:
        c = _coefficient(per_token_pair, "per_token_pair")
        super().__init__(_native.CostModel.full_attention(c), f"FullAttention({c!r})")


class PerTile(CostModel):
    """A tiled vision encoder (CLIP, SigLIP, InternViT): ``per_tile`` per tile of
    ``tokens_per_tile`` tokens, times 3 when trained, in the vision phase.

    >>> import microbatch.cost as mc
    >>> mc.PerTile(4.0, 256, training="frozen").cost([0], [[512]]).tolist()
    [[8.0, 0.0]]
    """

    __slots__ = ()

    def __init__(self, per_tile: float, tokens_per_tile: int, *, training: str = "trained") -> None:
        c = _coefficient(per_tile, "per_tile")
        t = _arrays.count(tokens_per_tile, "tokens_per_tile", maximum=2**32 - 1)
        super().__init__(
            _native.CostModel.per_tile(c, t, training),
            f"PerTile({c!r}, {t}, training={training!r})",
        )


class PerImage(CostModel):
    """A vision encoder with full attention per image (Qwen2-VL): ``per_patch * P +
    per_patch_pair * P**2`` per image of ``P = patches_per_token * tokens`` patches,
    times 3 when trained, in the vision phase.

    >>> import microbatch.cost as mc
    >>> mc.PerImage(1.0, 0.0, 4, training="frozen").cost([0], [[10]]).tolist()
    [[40.0, 0.0]]
    """

    __slots__ = ()

    def __init__(
        self, per_patch: float, per_patch_pair: float, patches_per_token: int, *, training: str = "trained"
    ) -> None:
        a = _coefficient(per_patch, "per_patch")
        b = _coefficient(per_patch_pair, "per_patch_pair")
        p = _arrays.count(patches_per_token, "patches_per_token", maximum=2**32 - 1)
        super().__init__(
            _native.CostModel.per_image(a, b, p, training),
            f"PerImage({a!r}, {b!r}, {p}, training={training!r})",
        )


class Windowed(CostModel):
    """A windowed vision encoder with some full-attention layers (Qwen2.5-VL), in the vision phase.

    Arguments as the crate's ``Windowed::new``: ``per_patch``, ``per_window_pair``
    (per squared patch within windows of ``window`` patches), ``per_patch_pair``
    (the full-attention layers, per squared patch of an image),
    ``patches_per_token``.

    >>> import microbatch.cost as mc
    >>> mc.Windowed(1.0, 0.0, 64, 0.0, 4, training="frozen").cost([0], [[10]]).tolist()
    [[40.0, 0.0]]
    """

    __slots__ = ()

    def __init__(
        self,
        per_patch: float,
        per_window_pair: float,
        window: int,
        per_patch_pair: float,
        patches_per_token: int,
        *,
        training: str = "trained",
    ) -> None:
        a = _coefficient(per_patch, "per_patch")
        b = _coefficient(per_window_pair, "per_window_pair")
        w = _arrays.count(window, "window", maximum=2**32 - 1)
        c = _coefficient(per_patch_pair, "per_patch_pair")
        p = _arrays.count(patches_per_token, "patches_per_token", maximum=2**32 - 1)
        super().__init__(
            _native.CostModel.windowed(a, b, w, c, p, training),
            f"Windowed({a!r}, {b!r}, {w}, {c!r}, {p}, training={training!r})",
        )


class Given(CostModel):
    """Bring your own costs: each sample costs what you pass as ``costs=`` (per phase);
    a group costs the sum of its samples' costs.

    >>> import numpy as np, microbatch.cost as mc
    >>> mc.Given().group_cost([10, 20], costs={"language": [0.5, 1.25]})
    (0.0, 1.75)
    """

    __slots__ = ()

    def __init__(self) -> None:
        super().__init__(_native.CostModel.given(), "Given()")


def preset(name: str) -> CostModel:
    """The FLOPs model of a named vision-language model pair (see :data:`PRESETS`).

    >>> import microbatch.cost as mc
    >>> m = mc.preset("llava-1.5-7b")
    >>> v, l = m.cost([300], [[576]])[0]
    >>> bool(v / (v + l) < 0.02)  # frozen CLIP: forward only
    True
    """
    if not isinstance(name, str):
        raise DtypeError(f"a preset name is a str, got {type(name).__name__}", item="name")
    return CostModel._wrap(_native.CostModel.preset(name), f"preset({name!r})")


class Linear(CostModel):
    """A linear model over named terms: ``sum(c[term] * feature[term](group))`` per phase.

    Each term (see :data:`TERMS`) is a feature of a group in a fixed phase:
    ``"vision.image_tokens"`` (image tokens), ``"vision.unit_attention"``
    (the sum over attention units of their tokens squared),
    ``"vision.window_attention(W,P)"`` (windows of ``W`` patches at ``P``
    patches per token, their squared sizes summed), ``"vision.tiles(T)"``
    (tiles of ``T`` tokens), ``"vision.images"``, ``"vision.units"`` (counts),
    ``"language.tokens"`` (text and image tokens),
    ``"language.document_attention"`` (the sum over samples of their tokens
    squared), ``"language.samples"`` (a count), ``"language.groups"`` (1 for
    a non-empty group: a fixed cost per micro-batch or packed sequence) and
    ``"language.row_attention"`` (the group's tokens squared: attention over
    a whole packed row under a dense mask, as sdpa and eager attention
    compute it; evaluate it on groups that are one packed row each).

    Args:
        coefficients: term name -> coefficient (finite, non-negative), in the
            order of the terms (at most 12 distinct terms).

    Raises:
        SettingError: an unknown term name (``item``: none; the message lists the known ones).
        InvalidValueError: a NaN, infinite or negative coefficient (``item``: the term).

    >>> import microbatch.cost as mc
    >>> m = mc.Linear({"language.tokens": 2e-6, "language.samples": 1e-3})
    >>> m.terms
    ('language.tokens', 'language.samples')
    >>> m.group_cost([1000, 500])  # 2e-6 * 1500 + 1e-3 * 2
    (0.0, 0.005)
    """

    __slots__ = ()

    def __init__(self, coefficients: Mapping[str, float]) -> None:
        if not isinstance(coefficients, Mapping):
            raise DtypeError(
                f"coefficients must be a dict of term name -> coefficient, got {type(coefficients).__name__}",
                item="coefficients",
            )
        names = []
        values = []
        for name, value in coefficients.items():
            if not isinstance(name, str):
                raise DtypeError(f"a term name is a str, got {type(name).__name__} {name!r}", item="coefficients")
            names.append(name)
            values.append(_coefficient(value, name))
        native = _native.CostModel.linear(names, values)
        super().__init__(native, "")
        self._repr = f"Linear({self.coefficients!r})"

    @classmethod
    def _from_native(cls, native: Any) -> "Linear":
        model = Linear.__new__(Linear)
        CostModel.__init__(model, native, "")
        model._repr = f"Linear({model.coefficients!r})"
        return model

    @classmethod
    def preset(cls, name: str, *, attention: str = "varlen") -> "Linear":
        """The FLOPs preset ``name`` as a linear model over its terms, equal to
        :func:`preset` within rounding, with the overhead terms (images, units,
        samples, groups) at 0: the terms a :class:`Calibrator` fits.

        ``attention`` is the attention kernel the training runs on packed
        rows: ``"varlen"`` (FlashAttention varlen / ``flash_attention_2`` with
        packed ``position_ids``, xFormers or FlexAttention document masks:
        each sample attends within itself, ``language.document_attention``)
        or ``"dense"`` (``sdpa`` and ``eager`` attention: the whole row is
        computed under its block mask, ``language.row_attention`` at the same
        coefficient).

        >>> import microbatch.cost as mc
        >>> dense = mc.Linear.preset("llava-1.5-7b", attention="dense")
        >>> dense.terms[:3]
        ('vision.tiles(576)', 'language.tokens', 'language.row_attention')

        >>> import microbatch.cost as mc
        >>> m = mc.Linear.preset("llava-1.5-7b")
        >>> m.terms[:3]
        ('vision.tiles(576)', 'language.tokens', 'language.document_attention')
        >>> a, b = m.cost([300], [[576]])[0], mc.preset("llava-1.5-7b").cost([300], [[576]])[0]
        >>> bool(abs(a[1] / b[1] - 1) < 1e-12)
        True
        """
        if not isinstance(name, str):
            raise DtypeError(f"a preset name is a str, got {type(name).__name__}", item="name")
        if not isinstance(attention, str):
            raise DtypeError(f"attention is a str, got {type(attention).__name__}", item="attention")
        return cls._from_native(_native.CostModel.linear_preset(name, attention))

    def _terms(self) -> Tuple[list, list]:
        got = self._native.linear_terms
        return got if got is not None else ([], [])

    @property
    def terms(self) -> Tuple[str, ...]:
        """The term names, in order."""
        return tuple(self._terms()[0])

    @property
    def coefficients(self) -> Dict[str, float]:
        """Term name -> coefficient, in the order of the terms."""
        names, values = self._terms()
        return dict(zip(names, values))


@dataclasses.dataclass(frozen=True)
class Drift:
    """The prediction error of a fitted model on the rows observed after its fit.

    Relative errors are ``predicted / measured - 1`` of a row's whole time;
    rows of time zero are not counted.

    Attributes:
        rows: the rows counted.
        mean_relative_error: the mean of ``|predicted / measured - 1|`` (0 without rows).
        max_relative_error: the largest ``|predicted / measured - 1|`` (0 without rows).
        bias: the mean of ``predicted / measured - 1``: negative when the model
            predicts less than was measured (0 without rows).
    """

    rows: int
    mean_relative_error: float
    max_relative_error: float
    bias: float


@dataclasses.dataclass(frozen=True)
class Calibration:
    """The state of a :class:`Calibrator` after a refit: the model in use and how well it fits.

    Attributes:
        fitted: whether the model is fitted (``False``: the fallback is in use).
        reason: why the fallback is in use (``None`` when fitted): not
            refitted yet, too few rows, nothing identified, or the fit failed.
        coefficients: term name -> coefficient of the model in use.
        identified: the terms the fit told apart (a term whose feature is
            zero in every kept row, or a combination of the terms before it,
            is not identified and has coefficient 0); empty for the fallback.
        r_squared: R^2 over the kept rows' whole times (``None`` unfitted).
        max_relative_error: the worst ``|predicted / measured - 1|`` over the
            kept rows (``None`` unfitted).
        rows: the rows used (the window less the rejected ones).
        rejected: the rows rejected as outliers, by position in the window at
            the refit (0 the oldest), ascending.
        drift: the previous fitted model's error on the rows observed between
            it and this refit.
    """

    fitted: bool
    reason: Optional[str]
    coefficients: Dict[str, float]
    identified: Tuple[str, ...]
    r_squared: Optional[float]
    max_relative_error: Optional[float]
    rows: int
    rejected: Tuple[int, ...]
    drift: Drift

    @classmethod
    def _from_native(cls, d: Dict[str, Any]) -> "Calibration":
        return cls(
            fitted=bool(d["fitted"]),
            reason=d["reason"],
            coefficients=dict(zip(d["terms"], d["coefficients"])),
            identified=tuple(t for t, ok in zip(d["terms"], d["identified"]) if ok),
            r_squared=d["r_squared"],
            max_relative_error=d["max_relative_error"],
            rows=int(d["rows"]),
            rejected=tuple(d["rejected"]),
            drift=Drift(*d["drift"]),
        )


def _seconds(value: Any, name: str) -> Optional[float]:
    """A measured time: ``None``, or a real number (its range is checked by the crate)."""
    if value is None:
        return None
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise DtypeError(f"{name} must be a number of seconds, got {type(value).__name__} {value!r}", item=name)
    return float(value)


class Calibrator:
    """Online calibration of a :class:`Linear` model's coefficients from measured micro-batch times.

    Observe every measured micro-batch (its samples and its time, per phase
    or in total), :meth:`refit` at a step boundary, and plan the next step with
    :attr:`model` (``microbatch.Planner(calibrator.model, ...)``). Until the
    window identifies the terms, :attr:`model` is the fallback (the preset's
    FLOPs) and :attr:`status` says why.

    The fit (the crate's ``Calibrator``): non-negative coefficients minimizing
    squared relative errors over the last ``window`` rows (per-phase rows fit
    the vision terms on the vision time and the language terms on the
    language time; total rows fit all terms on the total); rows whose
    relative residual is beyond 3.5 robust standard deviations (median
    absolute deviation) are rejected as outliers and the fit is redone, a few
    rounds at most, so a micro-batch slowed 2x by a hiccup does not move the
    coefficients. Deterministic: every rank that observes the same rows in
    the same order fits the same model. Memory is bounded by the window.

    Args:
        model: the terms to fit, with their fallback coefficients: a preset
            name (:data:`PRESETS`; its terms by :meth:`Linear.preset`) or a
            :class:`Linear`.
        window: the rows kept (the oldest leaves); at least 1.
        min_rows: fit only from this many equations on (a per-phase row gives
            two); ``None``: twice the identified terms.
        attention: with a preset name, the attention kernel the training
            runs (``"varlen"`` or ``"dense"``, see :meth:`Linear.preset`).

    Raises:
        SettingError: a model that is not linear, an unknown preset.

    Complexity: :meth:`observe` O(terms x samples); :meth:`refit` linear in
    the window (a few non-negative least-squares fits of ``window`` rows).

    Example (timings from a known model, one row slowed 2x):

    >>> import microbatch, microbatch.cost as mc
    >>> truth = mc.Linear({"language.tokens": 3e-6, "language.samples": 2e-4,
    ...                    "vision.image_tokens": 2e-6, "vision.images": 4e-4})
    >>> cal = mc.Calibrator("qwen2.5-vl-7b")
    >>> for i in range(40):
    ...     text = [100 + 37 * ((i * 7 + j) % 50) for j in range(1 + i % 4)]
    ...     images = [[576] * (j % 2) for j in range(len(text))]
    ...     v, l = truth.group_cost(text, images)
    ...     slow = 2.0 if i == 17 else 1.0
    ...     cal.observe(text, images, vision_seconds=v * slow, language_seconds=l * slow)
    >>> status = cal.refit()
    >>> status.fitted, status.rejected
    (True, (17,))
    >>> round(status.coefficients["language.tokens"] / 3e-6, 6)
    1.0
    >>> plan = microbatch.Planner(cal.model, ranks=2, seq_len=4096).plan(
    ...     ids=range(6), text_tokens=[900, 300, 700, 100, 500, 200], image_tokens=[[576], [], [], [576], [], []])
    >>> plan.report.predicted > 0
    True
    """

    __slots__ = ("_native",)

    def __init__(
        self,
        model: Union[str, Linear],
        *,
        window: int = 4096,
        min_rows: Optional[int] = None,
        attention: str = "varlen",
    ) -> None:
        if isinstance(model, str):
            fallback = Linear.preset(model, attention=attention)
        elif isinstance(model, Linear):
            fallback = model
        else:
            raise DtypeError(
                f"model must be a preset name or a microbatch.cost.Linear, got {type(model).__name__}",
                item="model",
            )
        self._native = _native.Calibrator(
            fallback._native,
            _arrays.count(window, "window", minimum=1),
            None if min_rows is None else _arrays.count(min_rows, "min_rows"),
        )

    def observe(
        self,
        text_tokens: Any,
        image_tokens: _arrays.Ragged = None,
        *,
        image_units: _arrays.Ragged = None,
        vision_seconds: Optional[float] = None,
        language_seconds: Optional[float] = None,
        seconds: Optional[float] = None,
        rows: Any = None,
    ) -> None:
        """Observes one measured micro-batch: its samples and its time.

        Args:
            text_tokens: each sample's text tokens, 1-D.
            image_tokens: each sample's images as token counts (as for
                :meth:`microbatch.Planner.plan`); ``None`` for none.
            image_units: the units (tiles) of each image; ``None``: 1 each.
            vision_seconds, language_seconds: the phases' times, measured
                separately (give both) ...
            seconds: ... or the whole micro-batch's time (alone).
            rows: each sample's packed sequence in the micro-batch (any
                integer labels, 1-D); ``None``: all in one sequence. The terms
                that see rows (``language.row_attention``: each row's tokens
                squared, summed; ``language.groups``: one per row) need it
                when a micro-batch holds several packed sequences.

        Raises:
            SettingError: both forms of the time, or neither, or one phase
                without the other (``item``: ``"seconds"``).
            InvalidValueError: a NaN, infinite or negative time (``item``: its
                keyword); nothing is stored then.
            DtypeError: arrays of the wrong dtype or shape, a time that is not a number.
        """
        v = _seconds(vision_seconds, "vision_seconds")
        lang = _seconds(language_seconds, "language_seconds")
        total = _seconds(seconds, "seconds")
        phases = (v is not None, lang is not None)
        if not ((phases == (True, True) and total is None) or (phases == (False, False) and total is not None)):
            raise SettingError(
                "give vision_seconds and language_seconds (the phases timed separately), "
                "or seconds (the whole micro-batch), not both and not one phase alone",
                item="seconds",
            )
        text, img, units, offsets = _sample_arrays(text_tokens, image_tokens, image_units)
        labels = None if rows is None else _arrays.integers(rows, "rows", np.uint32, length=len(text))
        self._native.observe(text, img, units, offsets, v, lang, total, labels)

    def refit(self) -> Calibration:
        """Refits the coefficients on the window (at a step boundary) and returns the new state."""
        return Calibration._from_native(self._native.refit())

    @property
    def status(self) -> Calibration:
        """The state of the last :meth:`refit` (not refitted yet: the fallback, and the reason)."""
        return Calibration._from_native(self._native.status)

    @property
    def model(self) -> Linear:
        """The model in use: the last refit's fitted model, or the fallback."""
        return Linear._from_native(self._native.model)

    @property
    def fallback(self) -> Linear:
        """The fallback model; its terms are the terms fitted."""
        return Linear._from_native(self._native.fallback)

    @property
    def drift(self) -> Drift:
        """The fitted model's error on the rows observed since the last refit."""
        return Drift(*self._native.drift)

    @property
    def window(self) -> int:
        """The window's capacity in rows."""
        return self._native.window

    def __len__(self) -> int:
        """The rows in the window."""
        return self._native.rows

    def __repr__(self) -> str:
        return f"Calibrator({self.fallback!r}, window={self.window}, rows={len(self)})"


class Fit:
    """Coefficients fitted to measured times by non-negative least squares (see :func:`fit`).

    Attributes:
        coefficients: the fitted coefficients, one per feature column (non-negative).
        r_squared: the coefficient of determination of the fit.
        max_relative_error: the largest relative error over the rows.
        rows: the rows fitted.
        worst_row: the row of the largest relative error.
    """

    __slots__ = ("_native",)

    def __init__(self, native: Any) -> None:
        self._native = native

    @property
    def coefficients(self) -> np.ndarray:
        """The fitted coefficients, one per feature column."""
        return self._native.coefficients

    @property
    def r_squared(self) -> float:
        """R^2 of the fit (1.0 is perfect)."""
        return self._native.r_squared

    @property
    def max_relative_error(self) -> float:
        """The largest ``|predicted - measured| / measured`` over the rows."""
        return self._native.max_relative_error

    @property
    def rows(self) -> int:
        """The number of rows fitted."""
        return self._native.rows

    @property
    def worst_row(self) -> int:
        """The index of the row with the largest relative error."""
        return self._native.worst_row

    def predict(self, features: Any) -> Union[float, np.ndarray]:
        """The predicted time of one row of features (1-D: a float) or of each row (2-D: an array).

        >>> import microbatch.cost as mc
        >>> f = mc.fit([[1.0, 1.0], [2.0, 1.0], [3.0, 1.0]], [3.0, 5.0, 7.0])
        >>> round(f.predict([4.0, 1.0]), 9)
        9.0
        """
        a = _arrays.array(features, "features", integer=False)
        if a.dtype.kind not in "iuf" or a.dtype == np.bool_:
            raise DtypeError(f"features must be numbers, got dtype {a.dtype}", item="features")
        if a.ndim == 1:
            return float(self._native.predict(np.ascontiguousarray(a[None, :], dtype=np.float64))[0])
        if a.ndim != 2:
            raise DtypeError(f"features must be 1-D or 2-D, got shape {a.shape}", item="features")
        return self._native.predict(np.ascontiguousarray(a, dtype=np.float64))

    def __repr__(self) -> str:
        return (
            f"Fit(coefficients={self.coefficients.tolist()}, r_squared={self.r_squared:.6g}, "
            f"max_relative_error={self.max_relative_error:.3g}, rows={self.rows})"
        )


def fit(features: Any, times: Any) -> Fit:
    """Fits non-negative coefficients ``c`` so that ``features @ c`` predicts ``times``,
    minimizing the squared relative errors (the crate's ``fit``).

    Args:
        features: an ``(m, k)`` array: one row per measurement, one column per
            term (e.g. ``sum(T)``, ``sum(T**2)``, ``n``).
        times: the ``m`` measured times (positive).

    Raises:
        FitError: too few rows, a bad measurement, a rank-deficient column (``item``: the row or column).
        DtypeError: arrays of the wrong dtype or shape.

    >>> import numpy as np, microbatch.cost as mc
    >>> T = np.array([100.0, 200.0, 400.0, 800.0])
    >>> f = mc.fit(np.stack([T, T**2], axis=1), 2e-5 * T + 3e-10 * T**2)
    >>> bool(f.r_squared > 0.999999), f.rows
    (True, 4)
    """
    x = _arrays.array(features, "features", integer=False)
    t = _arrays.array(times, "times", integer=False)
    for a, name in ((x, "features"), (t, "times")):
        if a.dtype.kind not in "iuf" or a.dtype == np.bool_:
            raise DtypeError(f"{name} must be numbers, got dtype {a.dtype}", item=name)
    if x.ndim != 2:
        raise DtypeError(f"features must be 2-D (rows, terms), got shape {x.shape}", item="features")
    if t.ndim != 1:
        raise DtypeError(f"times must be 1-D, got shape {t.shape}", item="times")
    return Fit(
        _native.fit(np.ascontiguousarray(x, dtype=np.float64), np.ascontiguousarray(t, dtype=np.float64))
    )


def fit_terms(terms: Sequence["CostModel"], groups: Sequence[Any], times: Any) -> Tuple["CostModel", Fit]:
    """Fits one coefficient per term to measured group times and returns the fitted model.

    The crate's ``fit_terms``: each measured group (a packed sequence or a
    micro-batch) is one row whose features are every term's cost of the group
    (summed over phases); :func:`fit` finds non-negative coefficients ``c``
    minimizing the squared relative errors, and the model returned is
    ``terms[0].scale(c[0]) + terms[1].scale(c[1]) + ...``, ready for
    :class:`microbatch.Planner`. Give each term a unit coefficient (for
    example ``Tokens(1.0)``, ``DocumentAttention(1.0)``, ``PerGroup(1.0)``) so
    that the fitted coefficients read as seconds per unit.

    Args:
        terms: the models whose coefficients to fit (at least one).
        groups: one entry per measurement: a dict of the keyword arguments of
            :meth:`CostModel.group_cost` (``text_tokens``, optionally
            ``image_tokens``, ``image_units``), or a tuple
            ``(text_tokens, image_tokens)``.
        times: the measured time of each group (positive).

    Raises:
        FitError: fewer groups than terms plus one, a term that no group
            exercises or that repeats another (rank-deficient), a bad time.
        DtypeError: groups or times of the wrong form.

    Complexity: one evaluation of every term on every group (a Python loop
    over groups and terms; calibration sets are small), then the fit.

    >>> import microbatch.cost as mc
    >>> groups = [([800], None), ([300, 500], None), ([100, 200, 300], None), ([2000], None)]
    >>> times = [2e-6 * sum(t) + 1e-9 * sum(x * x for x in t) for t, _ in groups]
    >>> model, f = mc.fit_terms([mc.Tokens(1.0), mc.DocumentAttention(1.0)], groups, times)
    >>> [round(float(c / e), 6) for c, e in zip(f.coefficients, (2e-6, 1e-9))]
    [1.0, 1.0]
    >>> round(model.group_cost(text_tokens=[1000])[1] / (2e-6 * 1000 + 1e-9 * 1000**2), 6)
    1.0
    """
    terms = list(terms)
    if not terms or not all(isinstance(t, CostModel) for t in terms):
        raise DtypeError("terms must be a non-empty list of microbatch.cost models", item="terms")
    if isinstance(groups, (str, bytes)) or not hasattr(groups, "__len__"):
        raise DtypeError("groups must be a list, one entry per measured group", item="groups")
    rows = np.zeros((len(groups), len(terms)), dtype=np.float64)
    for i, g in enumerate(groups):
        if isinstance(g, dict):
            kwargs = g
        elif isinstance(g, (tuple, list)) and len(g) == 2:
            kwargs = {"text_tokens": g[0], "image_tokens": g[1]}
        else:
            raise DtypeError(
                f"groups[{i}] must be a dict of group_cost's arguments or a tuple (text_tokens, image_tokens)",
                item=i,
            )
        for j, term in enumerate(terms):
            vision, language = term.group_cost(**kwargs)
            rows[i, j] = vision + language
    f = fit(rows, times)
    model = terms[0].scale(float(f.coefficients[0]))
    for term, c in zip(terms[1:], f.coefficients[1:]):
        model = model + term.scale(float(c))
    return model, f

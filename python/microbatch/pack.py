"""Bin packing: every item goes into exactly one bin and no bin exceeds its capacity in any dimension.

The functions of the Rust crate's ``microbatch::pack`` over numpy arrays:

=============================  ====================  ================  ======================
function                       order                 time (1 dim.)     bins used (worst case)
=============================  ====================  ================  ======================
:func:`first_fit_decreasing`   sizes decreasing      O(n log n)        11/9 OPT + 6/9
:func:`best_fit_decreasing`    sizes decreasing      O(n log n)        11/9 OPT + 6/9
:func:`first_fit`              arrival               O(n log n)        1.7 OPT
:func:`best_fit`               arrival               O(n log n)        1.7 OPT
:func:`next_fit`               arrival               O(n)              2 OPT
=============================  ====================  ================  ======================

``sizes`` is a 1-D array ``(n,)`` or a 2-D array ``(n, d)`` (rows are items,
columns dimensions, e.g. tokens and image tiles), of unsigned or signed
integers (exact, as ``uint64``; negative values are refused) or of floats
(as ``float64``; NaN, infinite and negative values are refused). The
capacity is a scalar or a 1-D array with one value per dimension, of the same
kind as the sizes (a float capacity for integer sizes is refused: round it).
An item fits a bin when it fits in every dimension; the decreasing
variants order vector items by the largest fraction of the capacity they use
in any dimension (see the crate's ``pack`` module docs).

The result is a :class:`Packing`: the bins as arrays of item indices, their
loads, the bin of every item and the Martello-Toth lower bounds. Nothing is
done per item in Python; the GIL is released while the crate packs.

Errors (classes of :mod:`microbatch.errors`, with the crate's variant in
``kind`` and the offending item in ``item``): a capacity without dimension
(:class:`~microbatch.errors.CapacityError`, ``NoDimensions``), zero
(``ZeroCapacity``), negative, NaN or infinite (``InvalidCapacity``, item =
dimension); an item with another number of dimensions than the capacity
(``DimensionMismatch``, item = the item's index); a negative, NaN or infinite
size (:class:`~microbatch.errors.InvalidValueError`, ``InvalidSize``); items
larger than the capacity (:class:`~microbatch.errors.OversizeError`,
``Oversize``, item = the first of them); an array of another dtype or of more
than two dimensions (:class:`~microbatch.errors.DtypeError`).

Example:

>>> import numpy as np
>>> from microbatch import pack
>>> p = pack.best_fit_decreasing(np.array([[9000, 30], [8000, 30], [7000, 10], [1000, 20], [500, 0]]),
...                              [16384, 48])
>>> len(p), p.loads.tolist()
(3, [[16000, 40], [8500, 30], [1000, 20]])
>>> bool((p.loads <= [16384, 48]).all())
True
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any, List, Tuple, Union

import numpy as np

from . import _arrays, _native
from .errors import DtypeError

__all__ = [
    "Packing",
    "LowerBounds",
    "first_fit_decreasing",
    "best_fit_decreasing",
    "first_fit",
    "best_fit",
    "next_fit",
    "lower_bounds",
]

ArrayLike = Any
Scalar = Union[int, float]


@dataclass(frozen=True)
class LowerBounds:
    """Lower bounds on the number of bins any packing of the items needs.

    For several dimensions each bound is the largest of the one-dimensional
    bounds. A packing's bounds are clamped to its bin count (the packing is
    itself a witness that its count suffices).

    Attributes:
        l1: ``ceil(sum of sizes / capacity)``.
        l2: the Martello-Toth bound L2, at least ``l1``.

    Example:

    >>> from microbatch import pack
    >>> pack.lower_bounds([6, 6, 6, 1], 10)  # three items above half need three bins
    LowerBounds(l1=2, l2=3)
    """

    l1: int
    l2: int


def _sizes(x: ArrayLike, name: str) -> Tuple[np.ndarray, bool]:
    """``x`` as a C-contiguous 2-D array (a 1-D array as one column), and whether it was 2-D.

    Floats become ``float64``, unsigned integers ``uint64``, signed integers
    ``int64`` (:func:`_unsigned` converts them once the capacity is checked:
    the crate checks the capacity first). Only what the crate never sees is
    checked here: the Python object's dtype and shape (:class:`DtypeError`).
    The values (NaN, infinite, negative) are the crate's to check.
    """
    a = _arrays.array(x, name, integer=False)
    if a.dtype.kind not in "iuf":
        raise DtypeError(
            f"{name} must be an array of integers or floats, got dtype {a.dtype}", item=name
        )
    if a.ndim == 0 or a.ndim > 2:
        raise DtypeError(
            f"{name} must be a 1-D array (n,) or a 2-D array (n, dims), got shape {a.shape}",
            item=name,
        )
    two_d = a.ndim == 2
    a2 = a if two_d else a.reshape(-1, 1)
    dtype = {"f": np.float64, "u": np.uint64, "i": np.int64}[a.dtype.kind]
    return np.ascontiguousarray(a2, dtype=dtype), two_d


def _unsigned(a: np.ndarray, *, capacity: bool = False) -> np.ndarray:
    """Sizes (2-D) or a capacity (1-D) from :func:`_sizes` or :func:`_capacity` as the native module takes them.

    Floats and unsigned integers as they are. Signed integers become
    ``uint64`` through ``_native.unsigned``: the crate's sizes are unsigned,
    so it never sees a negative integer, and the conversion refuses the first
    one with the error the crate gives the same value as a float
    (``InvalidSize`` naming the item, ``InvalidCapacity`` the dimension).
    """
    if a.dtype != np.int64:
        return a
    dims = a.shape[1] if a.ndim == 2 else 1
    return _native.unsigned(a.reshape(-1), dims, capacity).reshape(a.shape)


def _capacity(c: ArrayLike, sizes: np.ndarray, name: str) -> Tuple[np.ndarray, np.ndarray, bool]:
    """The sizes (from :func:`_sizes`) and the capacity as arrays of one dtype for the native module, and whether the capacity was a scalar.

    Integer sizes take an integer capacity (a float one is refused: round it);
    float sizes take either, converted to ``float64``. Empty sizes take the
    capacity's kind. As for the sizes, only what the crate never sees is
    checked here (dtype and shape); signed integers are converted by
    :func:`_unsigned`, the capacity first.
    """
    a = _arrays.array(c, name, integer=False)
    if a.dtype.kind not in "iuf":
        raise DtypeError(f"{name} must be a number or an array of numbers, got dtype {a.dtype}", item=name)
    if a.ndim > 1:
        raise DtypeError(
            f"{name} must be a scalar or a 1-D array (one value per dimension), got shape {a.shape}",
            item=name,
        )
    scalar = a.ndim == 0
    a = a.reshape(-1)
    if sizes.dtype == np.float64 or a.dtype.kind == "f":
        if sizes.dtype != np.float64:
            if sizes.size:
                # The crate takes sizes and a capacity of one type; which one
                # is the binding's choice, so the crate cannot refuse this.
                raise DtypeError(
                    f"{name} is a float ({a.dtype}) but the sizes are integers: give an integer "
                    f"{name} (round it), or float sizes",
                    item=name,
                )
            sizes = sizes.astype(np.float64)
        elif a.dtype.kind != "f" and sizes.size == 0:
            sizes = sizes.astype(np.uint64)
    if sizes.dtype == np.float64:
        return sizes, np.ascontiguousarray(a, dtype=np.float64), scalar
    dtype = np.uint64 if a.dtype.kind == "u" else np.int64
    cap = _unsigned(np.ascontiguousarray(a, dtype=dtype), capacity=True)
    return _unsigned(sizes), cap, scalar


class Packing:
    """The result of a packing: bins as arrays of item indices, with their loads.

    Bins are numbered in the order they were opened; items within a bin are
    listed in the order they were placed.

    Attributes:
        bins: one ``int64`` array of item indices per bin.
        loads: the load of every bin, ``(bins,)`` for 1-D sizes, ``(bins, d)``
            for 2-D sizes (same dtype as the sizes: ``uint64`` or ``float64``).
        assignment: ``(n,)`` ``int64``, the bin of every item.
        items, offsets: the bins flattened (CSR): bin ``b`` holds
            ``items[offsets[b]:offsets[b + 1]]``.
        lower_bounds: the :class:`LowerBounds` of the instance.
        capacity: the capacity as given (a scalar, or an array of ``d``).

    Example:

    >>> from microbatch import pack
    >>> p = pack.next_fit([4, 4, 4, 4], 10)
    >>> len(p), [b.tolist() for b in p.bins], p.loads.tolist()
    (2, [[0, 1], [2, 3]], [8, 8])
    >>> p.assignment.tolist(), p.efficiency()
    ([0, 0, 1, 1], 0.8)
    """

    __slots__ = ("items", "offsets", "loads", "lower_bounds", "capacity", "_efficiencies", "_n", "__dict__")

    def __init__(
        self,
        items: np.ndarray,
        offsets: np.ndarray,
        loads: np.ndarray,
        lower_bounds: LowerBounds,
        capacity: Union[Scalar, np.ndarray],
        n: int,
        efficiencies: Tuple[float, ...],
    ) -> None:
        self.items: np.ndarray = items
        self.offsets: np.ndarray = offsets
        self.loads: np.ndarray = loads
        self.lower_bounds: LowerBounds = lower_bounds
        self.capacity: Union[Scalar, np.ndarray] = capacity
        # The crate's ``Packing::efficiency`` of every dimension, computed
        # by the native call that packed.
        self._efficiencies = efficiencies
        self._n = n
        for a in (items, offsets, loads):
            a.flags.writeable = False

    def __len__(self) -> int:
        """The number of bins."""
        return int(self.offsets.shape[0]) - 1

    def __repr__(self) -> str:
        return f"Packing(bins={len(self)}, items={self._n}, lower_bounds={self.lower_bounds})"

    @cached_property
    def bins(self) -> List[np.ndarray]:
        """The item indices of every bin (views into :attr:`items`)."""
        return _arrays.csr_groups(self.items, self.offsets)

    @cached_property
    def assignment(self) -> np.ndarray:
        """The bin of every item: ``assignment[i]`` is the bin holding item ``i``."""
        return _arrays.csr_owner(self.items, self.offsets, self._n)

    @property
    def dims(self) -> int:
        """The number of dimensions of the sizes."""
        return 1 if self.loads.ndim == 1 else int(self.loads.shape[1])

    def efficiency(self, dim: int = 0) -> float:
        """The sum of sizes in dimension ``dim`` over the total capacity of the bins used, in ``[0, 1]``.

        The crate's ``Packing::efficiency``, computed when it packed: ``1.0``
        when there are no bins, and ``0.0`` for a dimension out of range (the
        crate's answer there too).

        >>> from microbatch import pack
        >>> pack.first_fit([[6, 1], [6, 3], [3, 0]], [10, 4]).efficiency(1)
        0.5
        """
        if 0 <= dim < len(self._efficiencies):
            return self._efficiencies[dim]
        return 0.0


def _pack(algorithm: str, sizes: ArrayLike, capacity: ArrayLike) -> Packing:
    s, two_d = _sizes(sizes, "sizes")
    s, cap, scalar = _capacity(capacity, s, "capacity")
    native = _native.pack_f64 if s.dtype == np.float64 else _native.pack_u64
    items, offsets, loads, l1, l2, efficiencies = native(algorithm, s, cap)
    dims = int(cap.shape[0]) if cap.shape[0] else 1
    if two_d or not (scalar or cap.shape[0] == 1):
        loads = loads.reshape(-1, max(dims, 1))
    given = cap[0].item() if scalar else cap
    return Packing(items, offsets, loads, LowerBounds(int(l1), int(l2)), given, s.shape[0], tuple(efficiencies))


def first_fit_decreasing(sizes: ArrayLike, capacity: ArrayLike) -> Packing:
    """First-fit decreasing: items by decreasing size, each into the first bin where it fits.

    At most ``11/9 OPT + 6/9`` bins in one dimension. O(n log n) time for one
    dimension (see the module docs for several), O(n) extra space.

    Args:
        sizes: ``(n,)`` or ``(n, d)`` non-negative integers or floats.
        capacity: a scalar, or ``d`` values.

    Example:

    >>> from microbatch import pack
    >>> p = pack.first_fit_decreasing([3, 6, 4, 6, 1], 10)
    >>> len(p), [b.tolist() for b in p.bins], p.loads.tolist()
    (2, [[1, 2], [3, 0, 4]], [10, 10])
    """
    return _pack("first_fit_decreasing", sizes, capacity)


def best_fit_decreasing(sizes: ArrayLike, capacity: ArrayLike) -> Packing:
    """Best-fit decreasing: items by decreasing size, each into the fullest bin where it fits.

    At most ``11/9 OPT + 6/9`` bins in one dimension. O(n log n) time for one
    dimension (see the module docs for several), O(n) extra space.

    Example:

    >>> from microbatch import pack
    >>> p = pack.best_fit_decreasing([5, 7, 5, 2, 4, 2, 5, 1, 6], 10)
    >>> len(p), p.lower_bounds
    (4, LowerBounds(l1=4, l2=4))
    """
    return _pack("best_fit_decreasing", sizes, capacity)


def first_fit(sizes: ArrayLike, capacity: ArrayLike) -> Packing:
    """First fit in arrival order: each item into the first open bin where it fits.

    At most ``1.7 OPT`` bins. O(n log n) time for one dimension, O(n) extra space.

    Example:

    >>> from microbatch import pack
    >>> [b.tolist() for b in pack.first_fit([6, 6, 3], 10).bins]
    [[0, 2], [1]]
    """
    return _pack("first_fit", sizes, capacity)


def best_fit(sizes: ArrayLike, capacity: ArrayLike) -> Packing:
    """Best fit in arrival order: each item into the fullest open bin where it fits.

    At most ``1.7 OPT`` bins. O(n log n) time for one dimension, O(n) extra space.

    Example:

    >>> from microbatch import pack
    >>> pack.best_fit([0.5, 0.7, 0.5, 0.2], 1.0).assignment.tolist()
    [0, 1, 0, 1]
    """
    return _pack("best_fit", sizes, capacity)


def next_fit(sizes: ArrayLike, capacity: ArrayLike) -> Packing:
    """Next fit: keep one bin open, open a new one when the item does not fit.

    At most ``2 OPT`` bins. O(n d) time, O(n) extra space.

    Example:

    >>> from microbatch import pack
    >>> pack.next_fit([4, 4, 4, 4], 10).loads.tolist()
    [8, 8]
    """
    return _pack("next_fit", sizes, capacity)


def lower_bounds(sizes: ArrayLike, capacity: ArrayLike) -> LowerBounds:
    """The lower bounds L1 and L2 on the number of bins any packing of ``sizes`` needs.

    Validates as the packers do (same errors). O(n log n) time, O(n) extra space.

    Example:

    >>> from microbatch import pack
    >>> pack.lower_bounds([6, 6, 6, 1], 10)
    LowerBounds(l1=2, l2=3)
    >>> pack.lower_bounds([[6, 1], [6, 1], [6, 1], [1, 3]], [10, 4])
    LowerBounds(l1=2, l2=3)
    """
    s, _ = _sizes(sizes, "sizes")
    s, cap, _ = _capacity(capacity, s, "capacity")
    native = _native.pack_lower_bounds_f64 if s.dtype == np.float64 else _native.pack_lower_bounds_u64
    l1, l2 = native(s, cap)
    return LowerBounds(int(l1), int(l2))

"""Multiway number partitioning: split weighted items into ``k`` parts so that the heaviest part is as light as possible.

The functions of the Rust crate's ``microbatch::partition`` over numpy arrays:

- :func:`lpt`: longest processing time first (Graham 1969), each item to the
  least-loaded part, O(n log n + n log k), within ``4/3 - 1/(3k)`` of the
  optimum;
- :func:`karmarkar_karp`: the largest differencing method for ``k`` parts
  (Karmarkar & Karp 1982; Michiels et al. 2007), O(n log n + n k log k),
  usually much closer to the optimum than LPT with many items per part;
- :func:`lower_bound`: ``max(ceil(sum / k), largest item)`` and better where cheap;
- :func:`partition`: the crate's ``Partitioner``: an algorithm (``"lpt"``,
  ``"karmarkar_karp"`` or ``"exact"`` branch and bound within a node budget),
  refinement by moves and swaps (on by default), the objective
  (``"max_part"`` or ``"spread"``), its treatment of several dimensions
  (``"combined"`` or ``"per_dim"``), and hard constraints: equal item
  counts per part, a cap on every part sum, empty parts allowed or not.

``weights`` is a 1-D array ``(n,)`` or a 2-D array ``(n, d)`` (rows are
items), of non-negative integers (exact: sums are kept in 128 bits) or floats
(NaN, infinite and negative values are refused). The result is a
:class:`Partition`: the parts as arrays of item indices (heaviest item first),
the part sums, the objective and a lower bound on it.

Errors (classes of :mod:`microbatch.errors`, with ``kind`` and ``item``):
``k = 0`` (:class:`~microbatch.errors.SettingError`, ``ZeroParts``); more
parts than items without ``allow_empty`` (``TooManyParts``); a negative, NaN
or infinite weight (:class:`~microbatch.errors.InvalidValueError`,
``InvalidSize``, item = its index); rows of another length than the cap
(:class:`~microbatch.errors.CapacityError`, ``DimensionMismatch``); a cap
that no partition found meets (:class:`~microbatch.errors.InfeasibleError`,
``CapExceeded``, item = the dimension; the message names a part count that
works); an array of another dtype or shape (:class:`~microbatch.errors.DtypeError`).

Example:

>>> from microbatch import partition
>>> partition.lpt([8, 7, 6, 5, 4], 2).objective  # {8, 5, 4} and {7, 6}
17
>>> kk = partition.karmarkar_karp([8, 7, 6, 5, 4], 2)  # {8, 6} and {7, 5, 4}
>>> kk.objective, kk.lower_bound, kk.sums.tolist()
(16, 15, [16, 14])
>>> partition.partition([8, 7, 6, 5, 4], 2).objective  # LPT, refined
15
"""

from __future__ import annotations

from functools import cached_property
from typing import Any, List, Optional, Union

import numpy as np

from . import _arrays, _native
from ._arrays import count
from .pack import _capacity, _sizes, _unsigned

__all__ = [
    "Partition",
    "lpt",
    "karmarkar_karp",
    "lower_bound",
    "partition",
    "DEFAULT_NODE_BUDGET",
]

ArrayLike = Any
Number = Union[int, float]

#: The default node budget of exact search (the crate's ``DEFAULT_NODE_BUDGET``).
DEFAULT_NODE_BUDGET: int = _native.DEFAULT_NODE_BUDGET

# The names of ``algorithm``, ``objective`` and ``dims`` are the crate's: it
# reads them (an unknown name is a SettingError naming the setting and
# listing the names; ``_native.ALGORITHM_NAMES`` etc. hold them). Their
# defaults are the crate's too: each type's ``Default``, which
# ``Partitioner::new`` starts from. The crate has no accessor for the
# defaults of its switches (refinement on, equal_count and allow_empty off),
# which ``partition`` writes as ``Partitioner::new`` documents them.
_DEFAULT_ALGORITHM: str = _native.DEFAULT_ALGORITHM
_DEFAULT_OBJECTIVE: str = _native.DEFAULT_OBJECTIVE
_DEFAULT_DIMS: str = _native.DEFAULT_DIMS


class Partition:
    """A partition of items into parts, with its part sums, objective value and a lower bound on the optimum.

    Attributes:
        parts: one ``int64`` array of item indices per part, heaviest item
            first (ties by index).
        sums: the part sums, ``(k,)`` for 1-D weights, ``(k, d)`` for 2-D
            (``uint64`` for integer weights, or an ``object`` array of Python
            ints when a sum exceeds ``2**64 - 1``; ``float64`` for floats).
        objective: the objective value (by default the largest part sum).
        lower_bound: a lower bound on the objective of every partition of the
            same items under the same constraints.
        proven_optimal: whether the partition meets the lower bound or an
            exact search finished.
        items, offsets: the parts flattened (CSR): part ``p`` holds
            ``items[offsets[p]:offsets[p + 1]]``.

    Example:

    >>> from microbatch import partition
    >>> p = partition.lpt([5, 1, 4, 2, 3], 2)
    >>> len(p), [q.tolist() for q in p.parts], p.sums.tolist()
    (2, [[0, 3], [2, 4, 1]], [7, 8])
    >>> p.assignment.tolist(), p.objective, p.lower_bound, p.proven_optimal, p.ratio
    ([0, 1, 1, 0, 1], 8, 8, True, 1.0)
    """

    __slots__ = ("items", "offsets", "sums", "objective", "lower_bound", "proven_optimal", "_ratio", "_n", "__dict__")

    def __init__(
        self,
        items: np.ndarray,
        offsets: np.ndarray,
        sums: np.ndarray,
        objective: Number,
        lower_bound: Number,
        proven_optimal: bool,
        n: int,
        ratio: float,
    ) -> None:
        self.items: np.ndarray = items
        self.offsets: np.ndarray = offsets
        self.sums: np.ndarray = sums
        self.objective: Number = objective
        self.lower_bound: Number = lower_bound
        self.proven_optimal: bool = proven_optimal
        # The crate's ``Partition::ratio``, computed by the native call.
        self._ratio = ratio
        self._n = n
        for a in (items, offsets, sums):
            a.flags.writeable = False

    def __len__(self) -> int:
        """The number of parts."""
        return int(self.offsets.shape[0]) - 1

    def __repr__(self) -> str:
        return (
            f"Partition(parts={len(self)}, objective={self.objective}, "
            f"lower_bound={self.lower_bound}, proven_optimal={self.proven_optimal})"
        )

    @cached_property
    def parts(self) -> List[np.ndarray]:
        """The item indices of every part (views into :attr:`items`)."""
        return _arrays.csr_groups(self.items, self.offsets)

    @cached_property
    def assignment(self) -> np.ndarray:
        """The part of every item: ``assignment[i]`` is the part holding item ``i``."""
        return _arrays.csr_owner(self.items, self.offsets, self._n)

    @property
    def ratio(self) -> float:
        """The objective over its lower bound (1.0 is perfect); ``1.0`` when both are zero, ``inf`` when only the bound is.

        The crate's ``Partition::ratio``.

        >>> from microbatch import partition
        >>> partition.lpt([3, 3, 2, 2, 2], 2).ratio == 7 / 6  # LPT 7, optimum 6
        True
        """
        return self._ratio


def _run(
    method: str,
    weights: ArrayLike,
    k: Any,
    *,
    cap: ArrayLike = None,
    algorithm: str = _DEFAULT_ALGORITHM,
    refinement: bool = True,
    objective: str = _DEFAULT_OBJECTIVE,
    dims: str = _DEFAULT_DIMS,
    equal_count: bool = False,
    allow_empty: bool = False,
    node_budget: Optional[int] = None,
    max_rounds: Optional[int] = None,
) -> Partition:
    w, two_d = _sizes(weights, "weights")
    k = count(k, "k")
    if cap is not None:
        w, c, _ = _capacity(cap, w, "cap")
    else:
        w, c = _unsigned(w), None
    budget = DEFAULT_NODE_BUDGET if node_budget is None else count(node_budget, "node_budget")
    rounds = None if max_rounds is None else count(max_rounds, "max_rounds")
    native = _native.partition_f64 if w.dtype == np.float64 else _native.partition_u64
    items, offsets, sums, obj, lb, proven, ratio = native(
        method, w, k, c, algorithm, bool(refinement), objective, dims,
        bool(equal_count), bool(allow_empty), budget, rounds,
    )
    if not isinstance(sums, np.ndarray):
        sums = np.array(sums, dtype=object)
    d, parts = w.shape[1], len(offsets) - 1
    if two_d:
        if sums.size != parts * d:  # no items: the crate's sums have one dimension
            sums = np.zeros((parts, d), dtype=sums.dtype)
        sums = sums.reshape(parts, d)
    return Partition(items, offsets, sums, obj, lb, bool(proven), w.shape[0], ratio)


def lpt(weights: ArrayLike, k: int) -> Partition:
    """Longest processing time first: items by decreasing weight, each to the least-loaded part.

    Within ``4/3 - 1/(3k)`` of the optimal largest part. O(n log n + n log k)
    time (O(n + largest) for small integer weights), O(n + k) extra space.
    Items with several dimensions are placed by their combined weight.

    Args:
        weights: ``(n,)`` or ``(n, d)`` non-negative integers or floats.
        k: the number of parts, at least 1 and at most ``n``.

    Example:

    >>> from microbatch import partition
    >>> partition.lpt([[5, 1], [4, 0], [3, 2]], 2).sums.tolist()  # combined 6, 4, 5
    [[5, 1], [7, 2]]
    """
    return _run("lpt", weights, k)


def karmarkar_karp(weights: ArrayLike, k: int) -> Partition:
    """The largest differencing method (Karmarkar-Karp) for ``k`` parts.

    O(n log n + n k log k) time, O(n k) extra space; usually much closer to
    the optimum than :func:`lpt` when there are many items per part.

    Example:

    >>> from microbatch import partition
    >>> p = partition.karmarkar_karp([10, 9, 8, 7, 6, 5, 4], 3)
    >>> p.objective, p.proven_optimal
    (17, True)
    """
    return _run("karmarkar_karp", weights, k)


def lower_bound(weights: ArrayLike, k: int) -> Number:
    """A lower bound on the largest part of every partition of ``weights`` into ``k`` parts.

    ``max(ceil(sum / k), largest item)``, and the bounds of items that must
    share a part; items with several dimensions are bounded on their combined
    weight. O(n log n) time, O(n) extra space. A Python int for integer
    weights, a float for floats.

    Example:

    >>> from microbatch import partition
    >>> partition.lower_bound([4, 5, 6, 7, 8], 2), partition.lower_bound([9, 1, 1], 2)
    (15, 9)
    >>> partition.lower_bound([5, 5, 5], 2)  # two of the three share a part
    10
    """
    w, _ = _sizes(weights, "weights")
    w = _unsigned(w)
    k = count(k, "k")
    native = _native.partition_lower_bound_f64 if w.dtype == np.float64 else _native.partition_lower_bound_u64
    return native(w, k)


def partition(
    weights: ArrayLike,
    k: int,
    *,
    equal_count: bool = False,
    cap: ArrayLike = None,
    allow_empty: bool = False,
    objective: str = _DEFAULT_OBJECTIVE,
    dims: str = _DEFAULT_DIMS,
    algorithm: str = _DEFAULT_ALGORITHM,
    refinement: bool = True,
    node_budget: Optional[int] = None,
    max_rounds: Optional[int] = None,
) -> Partition:
    """Partitions ``weights`` into ``k`` parts with the crate's ``Partitioner``: options and hard constraints.

    Args:
        weights: ``(n,)`` or ``(n, d)`` non-negative integers or floats.
        k: the number of parts.
        equal_count: every part gets the same number of items, up to one.
        cap: a cap on every part sum: a scalar for 1-D weights, ``d`` values
            for 2-D (of the weights' kind). Never exceeded: when the heuristic
            misses it, an exact search within the node budget looks for a
            partition within it, else :class:`~microbatch.errors.InfeasibleError`.
        allow_empty: whether parts may be empty (else ``k > n`` is an error).
        objective: ``"max_part"`` (the largest part sum) or ``"spread"``
            (largest minus smallest).
        dims: for 2-D weights, ``"combined"`` (the objective of the sum over
            dimensions) or ``"per_dim"`` (the sum over dimensions of each
            dimension's objective).
        algorithm: ``"lpt"``, ``"karmarkar_karp"`` or ``"exact"`` (branch and
            bound from the refined LPT result, within the node budget).
        refinement: refine the constructed partition by moves and swaps.
        node_budget: the most branch-and-bound nodes (default
            :data:`DEFAULT_NODE_BUDGET`).
        max_rounds: the most improving steps of refinement (default ``16 (n + k)``).

    Complexity: the algorithm's, plus refinement (at most
    ``max(2^18, 2 (n + k)) d`` candidate evaluations); with a cap, at most
    about ``max(2^24, 16 (n + k) d)`` operations of search; ``"exact"`` up to
    the node budget, O(k d) a node.

    Example:

    >>> from microbatch import partition
    >>> tokens = [1800, 1700, 1500, 1400, 1200, 1100, 900, 800, 700, 600, 500, 400]
    >>> p = partition.partition(tokens, 4, equal_count=True, cap=5000)
    >>> [len(q) for q in p.parts], bool(p.sums.max() <= 5000)
    ([3, 3, 3, 3], True)
    >>> partition.partition([8, 7, 6, 5, 4], 2, algorithm="exact").proven_optimal
    True
    >>> partition.partition([[6, 0], [5, 0], [0, 6], [0, 5]], 2, dims="per_dim").objective
    12
    """
    return _run(
        "partition", weights, k, cap=cap, algorithm=algorithm, refinement=refinement,
        objective=objective, dims=dims, equal_count=equal_count, allow_empty=allow_empty,
        node_budget=node_budget, max_rounds=max_rounds,
    )

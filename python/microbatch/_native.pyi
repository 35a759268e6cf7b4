"""Type stubs of the native module ``microbatch._native`` (each area in its own section)."""

from typing import List, Optional, Tuple, Union

import numpy as np
import numpy.typing as npt

__version__: str

# --- pack/partition ---
# Sizes and weights arrive as C-contiguous 2-D arrays (n, d) (a 1-D input as one column);
# results come back flattened: (items, offsets) in CSR form, values row-major.

_PackOut = Tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray, int, int]

def pack_u64(
    algorithm: str, sizes: npt.NDArray[np.uint64], capacity: npt.NDArray[np.uint64]
) -> _PackOut:
    """Packs with ``algorithm``: returns (items, offsets, loads, l1, l2)."""

def pack_f64(
    algorithm: str, sizes: npt.NDArray[np.float64], capacity: npt.NDArray[np.float64]
) -> _PackOut:
    """:func:`pack_u64` for floats."""

def pack_lower_bounds_u64(
    sizes: npt.NDArray[np.uint64], capacity: npt.NDArray[np.uint64]
) -> Tuple[int, int]:
    """The lower bounds (l1, l2)."""

def pack_lower_bounds_f64(
    sizes: npt.NDArray[np.float64], capacity: npt.NDArray[np.float64]
) -> Tuple[int, int]:
    """The lower bounds (l1, l2) of float sizes."""

_PartitionOut = Tuple[
    npt.NDArray[np.int64],
    npt.NDArray[np.int64],
    Union[npt.NDArray, List[int]],
    Union[int, float],
    Union[int, float],
    bool,
]

def partition_u64(
    method: str,
    weights: npt.NDArray[np.uint64],
    k: int,
    cap: Optional[npt.NDArray[np.uint64]],
    algorithm: str,
    refinement: bool,
    objective: str,
    dims: str,
    equal_count: bool,
    allow_empty: bool,
    node_budget: int,
    max_rounds: Optional[int],
) -> _PartitionOut:
    """Partitions with ``method`` ("lpt", "karmarkar_karp" or "partition"): returns (items,
    offsets, sums, objective, lower_bound, proven_optimal)."""

def partition_f64(
    method: str,
    weights: npt.NDArray[np.float64],
    k: int,
    cap: Optional[npt.NDArray[np.float64]],
    algorithm: str,
    refinement: bool,
    objective: str,
    dims: str,
    equal_count: bool,
    allow_empty: bool,
    node_budget: int,
    max_rounds: Optional[int],
) -> _PartitionOut:
    """:func:`partition_u64` for floats."""

def partition_lower_bound_u64(weights: npt.NDArray[np.uint64], k: int) -> int:
    """The lower bound on the largest part."""

def partition_lower_bound_f64(weights: npt.NDArray[np.float64], k: int) -> float:
    """The lower bound on the largest part of float weights."""

DEFAULT_NODE_BUDGET: int
# --- end pack/partition ---

"""Type stubs of the native module ``microbatch._native`` (one section per area)."""

from typing import Any, Dict, List, Optional, Tuple, Union

import numpy as np
import numpy.typing as npt

__version__: str

# --- pack/partition ---
# Sizes and weights arrive as C-contiguous 2-D arrays (n, d) (a 1-D input as one column);
# results come back flattened: (items, offsets) in CSR form, values row-major.

_PackOut = Tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray, int, int, List[float]]

def unsigned(values: npt.NDArray[np.int64], dims: int, capacity: bool) -> npt.NDArray[np.uint64]:
    """Signed sizes (``dims`` columns, flattened) or a capacity as ``uint64``, refusing the
    first negative value with the crate's error (``InvalidSize`` or ``InvalidCapacity``)."""

def pack_u64(
    algorithm: str, sizes: npt.NDArray[np.uint64], capacity: npt.NDArray[np.uint64]
) -> _PackOut:
    """Packs with ``algorithm``: returns (items, offsets, loads, l1, l2, the crate's efficiency
    of every dimension)."""

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
    float,
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
    offsets, sums, objective, lower_bound, proven_optimal, the crate's ratio)."""

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
ALGORITHM_NAMES: List[str]
OBJECTIVE_NAMES: List[str]
DIMS_NAMES: List[str]
DEFAULT_ALGORITHM: str
DEFAULT_OBJECTIVE: str
DEFAULT_DIMS: str
# --- end pack/partition ---

# --- cost ---
class CostModel:
    @staticmethod
    def tokens(per_token: float) -> CostModel: ...
    @staticmethod
    def per_sample(cost: float) -> CostModel: ...
    @staticmethod
    def per_group(cost: float) -> CostModel: ...
    @staticmethod
    def document_attention(per_token_pair: float) -> CostModel: ...
    @staticmethod
    def full_attention(per_token_pair: float) -> CostModel: ...
    @staticmethod
    def per_tile(per_tile: float, tokens_per_tile: int, training: str) -> CostModel: ...
    @staticmethod
    def per_image(per_patch: float, per_patch_pair: float, patches_per_token: int, training: str) -> CostModel: ...
    @staticmethod
    def windowed(
        per_patch: float, per_window_pair: float, window: int, per_patch_pair: float, patches_per_token: int, training: str
    ) -> CostModel: ...
    @staticmethod
    def preset(name: str) -> CostModel: ...
    @staticmethod
    def given() -> CostModel: ...
    @staticmethod
    def linear(terms: List[str], coefficients: List[float]) -> CostModel: ...
    @staticmethod
    def linear_preset(name: str, attention: str = "varlen") -> CostModel: ...
    @property
    def linear_terms(self) -> Optional[Tuple[List[str], List[float]]]: ...
    def plus(self, other: CostModel) -> CostModel: ...
    def max(self, other: CostModel) -> CostModel: ...
    def scale(self, factor: float) -> CostModel: ...
    def in_phase(self, name: str) -> CostModel: ...
    @property
    def needs_costs(self) -> bool: ...
    def formula(self) -> str: ...
    def cost(
        self,
        text: npt.NDArray[np.uint32],
        image_tokens: npt.NDArray[np.uint32],
        image_units: Optional[npt.NDArray[np.uint32]],
        image_offsets: npt.NDArray[np.uint64],
        costs: Optional[npt.NDArray[np.float64]],
    ) -> npt.NDArray[np.float64]: ...
    def group_cost(
        self,
        text: npt.NDArray[np.uint32],
        image_tokens: npt.NDArray[np.uint32],
        image_units: Optional[npt.NDArray[np.uint32]],
        image_offsets: npt.NDArray[np.uint64],
        costs: Optional[npt.NDArray[np.float64]],
    ) -> Tuple[float, float]: ...

class Calibrator:
    def __init__(self, fallback: CostModel, window: int, min_rows: Optional[int]) -> None: ...
    def observe(
        self,
        text: npt.NDArray[np.uint32],
        image_tokens: npt.NDArray[np.uint32],
        image_units: Optional[npt.NDArray[np.uint32]],
        image_offsets: npt.NDArray[np.uint64],
        vision: Optional[float],
        language: Optional[float],
        seconds: Optional[float],
        rows: Optional[npt.NDArray[np.uint32]] = None,
    ) -> None: ...
    def refit(self) -> Dict[str, Any]: ...
    @property
    def status(self) -> Dict[str, Any]: ...
    @property
    def model(self) -> CostModel: ...
    @property
    def fallback(self) -> CostModel: ...
    @property
    def drift(self) -> Tuple[int, float, float, float]: ...
    @property
    def rows(self) -> int: ...
    @property
    def window(self) -> int: ...

class Fit:
    @property
    def coefficients(self) -> npt.NDArray[np.float64]: ...
    @property
    def r_squared(self) -> float: ...
    @property
    def max_relative_error(self) -> float: ...
    @property
    def rows(self) -> int: ...
    @property
    def worst_row(self) -> int: ...
    def predict(self, features: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]: ...

def fit(features: npt.NDArray[np.float64], times: npt.NDArray[np.float64]) -> Fit: ...

TERM_NAMES: List[str]
PRESET_NAMES: List[str]
PHASE_NAMES: List[str]
TRAINING_NAMES: List[str]
# --- end cost ---

# --- plan ---
class Planner:
    def __init__(
        self,
        model: object,
        ranks: int,
        seq_len: int,
        sync: str,
        micro_steps: Optional[int],
        fastest_micro_steps: Optional[int],
        max_units: Optional[int],
        max_images: Optional[int],
        sequences_per_micro_step: int,
        refinement: bool,
        locality: Optional[float],
        ranks_per_node: Optional[int],
        group_scope: str,
        search_effort: Optional[int],
        locality_effort: Optional[int],
    ) -> None: ...
    @property
    def needs_costs(self) -> bool: ...
    def plan(
        self,
        ids: npt.NDArray[np.uint64],
        text: npt.NDArray[np.uint32],
        image_tokens: npt.NDArray[np.uint32],
        image_units: Optional[npt.NDArray[np.uint32]],
        image_offsets: npt.NDArray[np.uint64],
        loss_tokens: Optional[npt.NDArray[np.uint64]],
        costs: Optional[npt.NDArray[np.float64]],
        origins: Optional[npt.NDArray[np.uint64]],
        origins_present: Optional[npt.NDArray[np.bool_]],
        groups: Optional[npt.NDArray[np.uint64]],
        groups_present: Optional[npt.NDArray[np.bool_]],
        bytes: Optional[npt.NDArray[np.uint64]],
        baseline: bool,
    ) -> Plan: ...

class Exchange:
    def __len__(self) -> int: ...
    def sends(self, src: int, dst: int) -> npt.NDArray[np.uint64]: ...
    def sent(self) -> npt.NDArray[np.uint64]: ...
    def received(self) -> npt.NDArray[np.uint64]: ...
    def bytes_out(self) -> npt.NDArray[np.uint64]: ...
    def bytes_in(self) -> npt.NDArray[np.uint64]: ...
    def moves(
        self,
    ) -> Tuple[npt.NDArray[np.uint64], npt.NDArray[np.uint64], npt.NDArray[np.uint64], npt.NDArray[np.uint64]]:
        """(ids, src, dst, bytes), sorted by (src, dst, id)."""

class Plan:
    @property
    def ranks(self) -> int: ...
    @property
    def micro_steps(self) -> int: ...
    @property
    def sequences_per_micro_step(self) -> int: ...
    def __len__(self) -> int: ...
    def micro_batch(self, rank: int, micro_step: int) -> npt.NDArray[np.uint64]: ...
    def sequences(self, rank: int, micro_step: int) -> List[npt.NDArray[np.uint64]]: ...
    def loss(self) -> Tuple[int, int, int]: ...
    def loss_scale(self, normalization: str, reduction: str) -> float: ...
    @property
    def fingerprint(self) -> int: ...
    def report(self) -> dict: ...
    def exchange(self) -> Optional[Exchange]: ...
    def to_json(self) -> str: ...
    @staticmethod
    def from_json(text: str) -> Plan: ...
SYNC_MODEL_NAMES: List[str]
NORMALIZATION_NAMES: List[str]
REDUCTION_NAMES: List[str]
GROUP_SCOPE_NAMES: List[str]

def normalization(value: Any) -> str:
    """The crate's name of the normalization ``value`` names (read by the crate), else the
    ``SettingError`` naming ``normalization`` that ``Plan.loss_scale`` raises."""
# --- end plan ---

# --- scenario ---
SCENARIO_NAMES: List[str]

def scenario(name: str, samples: int, seed: int) -> dict:
    """One step's samples of a scenario: ``ids`` (uint64), ``text_tokens`` (uint32),
    ``image_tokens``/``image_units`` (uint32, flattened), ``image_offsets`` (uint64,
    n + 1), ``loss_tokens`` (uint64), and ``model``, ``seq_len``, ``max_units``."""
    ...

# --- end scenario ---

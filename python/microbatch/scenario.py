"""Seeded generators of realistic vision-language batches: ``llava-sft``, ``anyres-mix`` and ``interleaved``.

The crate's ``scenario`` module as numpy arrays, for experiments and
benchmarks: each scenario draws one step's samples from the distributions of a
published training setup, with its model pair's cost preset, sequence length
and tile cap (see the crate's documentation for the sources).

>>> from microbatch import scenario
>>> batch = scenario.generate("anyres-mix", samples=256, seed=7)
>>> len(batch.ids), batch.model, batch.seq_len
(256, 'qwen2.5-vl-7b', 16384)
>>> plan = batch.planner(ranks=8).plan(**batch.arrays())
>>> len(plan)
256
"""

from __future__ import annotations

import dataclasses
from typing import Any, Dict, Optional, Tuple

import numpy as np

from . import _arrays, _native
from .plan import Planner

__all__ = ["Batch", "generate", "NAMES"]

#: The scenario names.
NAMES: Tuple[str, ...] = tuple(_native.SCENARIO_NAMES)


@dataclasses.dataclass(frozen=True)
class Batch:
    """One step's samples of a scenario, with the scenario's planner settings.

    Attributes:
        ids: ``uint64`` ids ``0..n``.
        text_tokens: ``uint32`` text tokens per sample.
        image_tokens: ``(values, offsets)``: the tokens of every image, flattened
            (``uint32``), and ``n + 1`` offsets (``uint64``).
        image_units: ``(values, offsets)``: the vision units (tiles) of every image.
        loss_tokens: ``uint64`` loss tokens per sample.
        model: the scenario's cost model preset.
        seq_len: the scenario's packed sequence length.
        max_units: the scenario's cap of vision units per sequence, or ``None``.

    >>> b = generate("llava-sft", samples=4, seed=1)
    >>> b.image_tokens[1].tolist() == b.image_units[1].tolist()
    True
    """

    ids: np.ndarray
    text_tokens: np.ndarray
    image_tokens: Tuple[np.ndarray, np.ndarray]
    image_units: Tuple[np.ndarray, np.ndarray]
    loss_tokens: np.ndarray
    model: str
    seq_len: int
    max_units: Optional[int]

    def arrays(self) -> Dict[str, Any]:
        """The keyword arguments of :meth:`microbatch.Planner.plan` for this batch.

        >>> b = generate("llava-sft", samples=3, seed=1)
        >>> sorted(b.arrays())
        ['ids', 'image_tokens', 'image_units', 'loss_tokens', 'text_tokens']
        """
        return {
            "ids": self.ids,
            "text_tokens": self.text_tokens,
            "image_tokens": self.image_tokens,
            "image_units": self.image_units,
            "loss_tokens": self.loss_tokens,
        }

    def planner(self, ranks: int, **settings: Any) -> Planner:
        """A :class:`microbatch.Planner` with the scenario's model, sequence
        length and cap, and ``settings`` (``sync``, ``micro_steps``, ...).

        >>> generate("interleaved", samples=8, seed=2).planner(ranks=2, sync="step").sync
        'step'
        """
        settings.setdefault("max_units", self.max_units)
        return Planner(self.model, ranks, self.seq_len, **settings)


def generate(name: str, samples: int, seed: int = 0) -> Batch:
    """``samples`` samples of scenario ``name`` (one of :data:`NAMES`) drawn with ``seed``.

    The same (name, samples, seed) gives the same batch as the crate's
    ``Scenario::generate`` on every platform. At most 2**24 samples a call
    (:class:`microbatch.LimitError` beyond).

    >>> generate("llava-sft", samples=2, seed=3).ids.tolist()
    [0, 1]
    """
    d = _native.scenario(
        name,
        _arrays.count(samples, "samples"),
        _arrays.count(seed, "seed"),
    )
    offsets = d["image_offsets"]
    return Batch(
        ids=d["ids"],
        text_tokens=d["text_tokens"],
        image_tokens=(d["image_tokens"], offsets),
        image_units=(d["image_units"], offsets),
        loss_tokens=d["loss_tokens"],
        model=d["model"],
        seq_len=d["seq_len"],
        max_units=d["max_units"],
    )

"""The streaming path of :mod:`microbatch.torch`: per-rank loaders balanced step by step.

Its public names are re-exported by :mod:`microbatch.torch`; import them from there.
"""

from typing import List

__all__: List[str] = []

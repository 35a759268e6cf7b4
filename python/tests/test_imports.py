"""The package's modules import each other without a cycle (issue 44).

Every import statement of every module under ``python/microbatch`` (at the
top or inside a function: a deferred import is still a dependency) is read
with :mod:`ast`, without importing anything; the modules and the imports
between them must form a directed acyclic graph. A submodule's implicit import
of its parent package (``microbatch.hf.collate`` runs ``microbatch/hf/__init__``
first) is no edge: only the imports the code writes are.
"""

from __future__ import annotations

import ast
import doctest
import importlib
import os
import pathlib
from typing import Dict, List, Optional, Set

import pytest

PACKAGE = pathlib.Path(__file__).resolve().parent.parent / "microbatch"


def module_name(root: pathlib.Path, path: pathlib.Path) -> str:
    """``microbatch.hf.collate`` for ``<root>/hf/collate.py``; a package's ``__init__.py`` is the package."""
    parts = [root.name, *path.relative_to(root).with_suffix("").parts]
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def import_graph(root: pathlib.Path) -> Dict[str, Set[str]]:
    """Every module of the package at ``root`` (its ``.py`` files) and the package's modules it imports."""
    files = {module_name(root, p): p for p in sorted(root.rglob("*.py"))}
    # Compiled modules (the native one, described by its stub): modules that import nothing of the package.
    leaves = {module_name(root, p.parent / p.name.split(".")[0]) for p in root.rglob("*") if p.suffix in (".so", ".pyd", ".pyi")}
    graph: Dict[str, Set[str]] = {name: set() for name in [*files, *leaves]}

    def known(name: str) -> Optional[str]:
        return name if name in files or name in leaves else None

    for name, path in files.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets: List[Optional[str]] = []
            if isinstance(node, ast.Import):
                for alias in node.names:
                    # ``import microbatch.torch`` imports microbatch.torch (and its parents: implicit, no edge).
                    targets.append(known(alias.name))
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")
                    base = base[: len(base) - (node.level - 1)]
                    source = ".".join(base + ([node.module] if node.module else []))
                else:
                    source = node.module or ""
                # ``from . import x``: x is a submodule (an edge to it) or a name of the package itself.
                subs = [known(f"{source}.{alias.name}") for alias in node.names]
                targets.extend(subs)
                if node.module or not all(subs):
                    targets.append(known(source))
            graph[name].update(t for t in targets if t is not None and t != name)
    return graph


def find_cycle(graph: Dict[str, Set[str]]) -> Optional[List[str]]:
    """A cycle of ``graph`` as the list of its modules (the first repeated at the end), else ``None``."""
    state: Dict[str, int] = {}  # 1: on the current path, 2: done
    path: List[str] = []

    def visit(node: str) -> Optional[List[str]]:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt) :] + [nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


def test_the_package_imports_form_no_cycle():
    graph = import_graph(PACKAGE)
    assert "microbatch.torch" in graph and "microbatch._torch_common" in graph, sorted(graph)
    # The graph is read, not empty: the torch side's modules import the shared helpers.
    for user in ("microbatch.torch", "microbatch._stream", "microbatch._timing"):
        assert "microbatch._torch_common" in graph[user], (user, sorted(graph[user]))
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_the_shared_helpers_import_no_module_that_uses_them():
    """``_torch_common`` sits below every module of the torch side: it imports none of them."""
    graph = import_graph(PACKAGE)
    users = {"microbatch.torch", "microbatch._stream", "microbatch._timing", "microbatch._step"}
    users |= {m for m in graph if m.startswith("microbatch.hf")}
    reach: Set[str] = set()
    todo = ["microbatch._torch_common"]
    while todo:
        for nxt in graph[todo.pop()]:
            if nxt not in reach:
                reach.add(nxt)
                todo.append(nxt)
    assert not (reach & users), sorted(reach & users)


def write_package(root: pathlib.Path, files: Dict[str, str]) -> pathlib.Path:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def test_a_cycle_is_found(tmp_path):
    """The check sees the cycle the package had (``torch`` re-exporting ``_stream``, which imported
    ``torch`` inside a function), through relative, deferred and ``from . import`` forms alike."""
    pkg = write_package(tmp_path / "pkg", {
        "__init__.py": "from . import errors\n",
        "errors.py": "",
        "torch.py": "from .errors import E\nfrom ._stream import *\n",
        "_stream.py": "import os\n\ndef f():\n    from .torch import loss_tokens\n    return loss_tokens\n",
        "sub/__init__.py": "",
        "sub/collate.py": "from ..torch import helper\n",
    })
    graph = import_graph(pkg)
    assert graph["pkg._stream"] == {"pkg.torch"} and graph["pkg.sub.collate"] == {"pkg.torch"}, graph
    assert find_cycle(graph) == ["pkg._stream", "pkg.torch", "pkg._stream"]
    # Broken the way the package was fixed: both import a shared module, which imports neither.
    (pkg / "_common.py").write_text("from .errors import E\n")
    (pkg / "_stream.py").write_text("def f():\n    from ._common import loss_tokens\n")
    assert find_cycle(import_graph(pkg)) is None
    # ``from . import x`` of a submodule, an absolute import and a longer cycle through a package.
    (pkg / "errors.py").write_text("import pkg.sub.collate\n")
    (pkg / "sub/__init__.py").write_text("from .. import errors\n")
    cycle = find_cycle(import_graph(pkg))
    assert cycle is not None and cycle[0] == cycle[-1], cycle
    assert set(cycle) == {"pkg._common", "pkg.errors", "pkg.sub.collate", "pkg.torch", "pkg._stream"}, cycle


def test_the_shared_helpers_examples():
    """``_torch_common`` is private (the docs' example run skips it): its examples run here."""
    pytest.importorskip("torch")
    module = importlib.import_module("microbatch._torch_common")
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0 and result.failed == 0, result


def test_torch_reads_the_shared_helpers_and_reexports_the_public_names():
    """``microbatch.torch`` uses the helpers of ``_torch_common`` themselves (one copy, no alias of its own)."""
    pytest.importorskip("torch")
    from microbatch import _torch_common as common
    from microbatch import torch as T

    assert T.IGNORE_INDEX == common.IGNORE_INDEX == -100
    assert (T.as_tensor, T.tokens, T.packed_layout) == (common.as_tensor, common.tokens, common.packed_layout)
    assert not any(hasattr(T, name) for name in ("_as_tensor", "_tokens", "_packed_layout"))
    for name in ("BalancedStream", "StreamError", "PhaseTimer", "find_phase_modules", "loss_tokens"):
        assert name in T.__all__ and getattr(T, name) is not None, name
    assert os.path.basename(T.__file__) == "torch.py"

"""Every example in the docstrings of the installed package runs and prints what it says."""

import doctest
import importlib
import pkgutil

import pytest

import microbatch


def modules():
    names = ["microbatch"]
    for info in pkgutil.iter_modules(microbatch.__path__, "microbatch."):
        if not info.name.split(".")[-1].startswith("_"):
            names.append(info.name)
    return sorted(names)


@pytest.mark.parametrize("name", modules())
def test_docstring_examples(name):
    if name == "microbatch.torch":
        pytest.importorskip("torch")
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0, f"{name} has no example in its docstrings"
    assert result.failed == 0, f"{result.failed} of {result.attempted} examples failed in {name}"


def test_every_public_item_has_a_docstring():
    missing = []
    for name in modules():
        if name == "microbatch.torch":
            continue
        module = importlib.import_module(name)
        for attr in getattr(module, "__all__", []):
            obj = getattr(module, attr)
            if callable(obj) and not (getattr(obj, "__doc__", None) or "").strip():
                missing.append(f"{name}.{attr}")
    assert not missing, f"without a docstring: {missing}"

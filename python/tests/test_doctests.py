"""Every example in the docstrings of the installed package runs and prints what it says."""

import doctest
import importlib
import importlib.util
import os
import pkgutil

import pytest

import microbatch


def modules():
    names = ["microbatch"]
    for info in pkgutil.iter_modules(microbatch.__path__, "microbatch."):
        short = info.name.split(".")[-1]
        if short.startswith("_"):
            continue
        names.append(info.name)
        if info.ispkg:  # microbatch.hf and its modules (listed without importing them)
            path = [os.path.join(os.path.dirname(microbatch.__file__), short)]
            names += [i.name for i in pkgutil.iter_modules(path, info.name + ".") if not i.name.split(".")[-1].startswith("_")]
    return sorted(names)


# The optional dependencies each module needs: without them its examples are skipped.
NEEDS = {
    "microbatch.torch": ("torch",),
    # The Trainer integration also needs accelerate (transformers.Trainer imports it).
    "microbatch.hf.trainer": ("torch", "transformers", "accelerate"),
    "microbatch.hf": ("torch", "transformers"),
}


def needs(name):
    return next((deps for prefix, deps in NEEDS.items() if name == prefix or name.startswith(prefix + ".")), ())


@pytest.mark.parametrize("name", modules())
def test_docstring_examples(name):
    for dep in needs(name):
        pytest.importorskip(dep)
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0, f"{name} has no example in its docstrings"
    assert result.failed == 0, f"{result.failed} of {result.attempted} examples failed in {name}"


def test_every_public_item_has_a_docstring():
    missing = []
    for name in modules():
        if name == "microbatch.torch" or any(importlib.util.find_spec(d) is None for d in needs(name)):
            continue
        module = importlib.import_module(name)
        for attr in getattr(module, "__all__", []):
            obj = getattr(module, attr)
            if callable(obj) and not (getattr(obj, "__doc__", None) or "").strip():
                missing.append(f"{name}.{attr}")
    assert not missing, f"without a docstring: {missing}"

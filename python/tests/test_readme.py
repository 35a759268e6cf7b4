"""The READMEs' Python code runs as written: every ```python block of the root README (the
quickstart) and of python/README.md (the Python guide), each block on its own, in a fresh
namespace, so that a failure names its file and block."""

import importlib.util
import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
READMES = {"README.md": ROOT / "README.md", "python/README.md": ROOT / "python" / "README.md"}

# What a block needs beyond numpy and the package: a block that imports one of these is skipped
# where it is missing (CI installs them all).
OPTIONAL = ("torch", "transformers", "accelerate")


def blocks(name):
    text = READMES[name].read_text(encoding="utf-8")
    return re.findall(r"```python\n(.*?)```", text, flags=re.S)


CASES = [(name, i) for name in READMES for i in range(len(blocks(name)))]


def test_every_readme_has_python_blocks():
    # The quickstart in the root README; the guide's sections in python/README.md (the plan, the
    # sampler, locality, streaming, transformers' loop and Trainer, timing, dense attention).
    assert len(blocks("README.md")) >= 1
    assert len(blocks("python/README.md")) >= 8


def needs(code):
    return [m for m in OPTIONAL if re.search(rf"^\s*(import|from) {m}\b|import .*\b{m}\b", code, re.M)]


@pytest.mark.parametrize(("name", "index"), CASES, ids=[f"{n}-block{i}" for n, i in CASES])
def test_readme_python_block_runs(name, index, capsys):
    code = blocks(name)[index]
    missing = [m for m in needs(code) if importlib.util.find_spec(m) is None]
    if missing:
        pytest.skip(f"{name} python block {index} needs {', '.join(missing)}")
    namespace = {"__name__": f"readme_block_{index}"}
    exec(compile(code, f"{name} python block {index}", "exec"), namespace)
    if name == "README.md" and index == 0:
        # The quickstart prints the report's ratio and the plan's fingerprint.
        plan = namespace["plan"]
        assert capsys.readouterr().out.split() == [str(plan.report.ratio), str(plan.fingerprint)]
        assert plan.report.ratio >= 1.0

"""The README's Python quickstart runs as written (every ```python block of the root README)."""

import importlib.util
import pathlib
import re

README = pathlib.Path(__file__).resolve().parents[2] / "README.md"


def blocks():
    text = README.read_text(encoding="utf-8")
    return re.findall(r"```python\n(.*?)```", text, flags=re.S)


def test_readme_has_python_blocks():
    assert len(blocks()) >= 1


def test_readme_python_blocks_run(capsys):
    for i, code in enumerate(blocks()):
        if "import torch" in code and importlib.util.find_spec("torch") is None:
            continue  # the sampler's block needs torch (CI installs it)
        namespace = {"__name__": f"readme_block_{i}"}
        exec(compile(code, f"README.md python block {i}", "exec"), namespace)
    # The quickstart prints the report's ratio and the fingerprint.
    assert capsys.readouterr().out.strip()

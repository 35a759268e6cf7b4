#!/usr/bin/env bash
# Builds and installs the Python package from this clone (`pip install ./python`,
# as the README says) into a virtual environment, then runs its tests: the
# binding against the crate, the type hints (mypy), the doctests, the README's
# quickstart, and the PyTorch sampler in real torch.distributed processes over
# loopback.
#
#     scripts/python-tests.sh [PYTEST ARGS...]
#
# The environment is .venv in the repository root (MICROBATCH_VENV to choose
# another); it is created when missing and reused after. PYTHON picks the
# interpreter that creates it (python3 by default; 3.9 or newer).
set -euo pipefail
cd "$(dirname "$0")/.."

venv="${MICROBATCH_VENV:-.venv}"
if [ ! -x "$venv/bin/python" ]; then
    "${PYTHON:-python3}" -m venv "$venv"
fi
# Absolute, as the steps below run from other folders.
venv="$(cd "$venv" && pwd)"
"$venv/bin/python" -m pip install -q --upgrade pip
"$venv/bin/python" -m pip install -q -r python/requirements-test.txt
# A release build of the extension (maturin, from python/pyproject.toml).
"$venv/bin/python" -m pip install -q --force-reinstall --no-deps ./python
# The package's type hints and the native module's stubs agree, and the
# examples use the package as its hints say.
(cd python && "$venv/bin/python" -m mypy --ignore-missing-imports microbatch examples)
# From python/tests, so that `import microbatch` is the installed package,
# never the source folder.
cd python/tests
exec "$venv/bin/python" -m pytest -q "$@"

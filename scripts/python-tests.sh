#!/usr/bin/env bash
# Builds and installs the Python package from this clone (`pip install ./python`,
# as the README says) into a virtual environment, then runs its tests: the
# binding against the crate, the type hints (mypy), the doctests, the README's
# quickstart, and the PyTorch sampler in real torch.distributed processes over
# loopback.
#
#     scripts/python-tests.sh [PYTEST ARGS...]   # all of it
#     scripts/python-tests.sh --prepare          # the environment, the package and mypy only
#     scripts/python-tests.sh --tests [PYTEST ARGS...]  # the tests only, after --prepare
#
# (.ci/run starts --prepare in the background at its start, so that the
# download of the test dependencies and the release build overlap the Rust
# steps, and runs --tests at the end.)
#
# The environment is .venv in the repository root (MICROBATCH_VENV to choose
# another); it is created when missing and reused after. PYTHON picks the
# interpreter that creates it (python3 by default; 3.9 or newer). The test
# dependencies (python/requirements-test.txt: torch, transformers, ...) are
# installed by uv (a pinned version, from the package registry into the
# environment itself): the same packages as pip installs, downloaded in
# parallel (measured: 144 s against pip's 427 s on a loaded machine).
set -euo pipefail
cd "$(dirname "$0")/.."

prepare=true
tests=true
case "${1:-}" in
--prepare) tests=false; shift ;;
--tests) prepare=false; shift ;;
esac

UV_VERSION=0.13.9
venv="${MICROBATCH_VENV:-.venv}"
if "$prepare"; then
    if [ ! -x "$venv/bin/python" ]; then
        "${PYTHON:-python3}" -m venv "$venv"
    fi
fi
# Absolute, as the steps below run from other folders.
venv="$(cd "$venv" && pwd)"

if "$prepare"; then
    "$venv/bin/python" -m pip install -q --upgrade pip
    if [ "$("$venv/bin/uv" --version 2>/dev/null)" != "uv $UV_VERSION" ]; then
        "$venv/bin/python" -m pip install -q "uv==$UV_VERSION"
    fi
    "$venv/bin/uv" pip install -q --python "$venv/bin/python" -r python/requirements-test.txt
    # A release build of the extension (maturin, from python/pyproject.toml),
    # by pip as the README says: uv would reuse a cached build of the
    # package after a change to its Rust source.
    "$venv/bin/python" -m pip install -q --force-reinstall --no-deps ./python
    # The package's type hints and the native module's stubs agree, and the
    # examples use the package as its hints say.
    (cd python && "$venv/bin/python" -m mypy --ignore-missing-imports microbatch examples)
fi

if "$tests"; then
    # From python/tests, so that `import microbatch` is the installed package,
    # never the source folder.
    cd python/tests
    exec "$venv/bin/python" -m pytest -q "$@"
fi

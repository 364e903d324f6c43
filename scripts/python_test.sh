#!/usr/bin/env bash
# python_test.sh — build the Python package the way a user does (pip install . into the
# virtual environment .venv at the repository root) and run its tests (tests/python).
#   SDPA_PY_TORCH=1 (default) also installs PyTorch from PyPI into .venv, if it is not
#     there yet, for the comparisons with torch's own SDPA and autograd (about 1-2 minutes;
#     PyPI's Linux wheel brings its CUDA libraries, ~5 GB, though the tests use the CPU).
#     SDPA_PY_TORCH=0 leaves torch out; a failed install only warns. Without torch those
#     tests skip with the reason in pytest's summary.
#   SDPA_JOBS limits build parallelism; PYTHON picks the interpreter (default python3).
set -euo pipefail
cd "$(dirname "$0")/.."
python=${PYTHON:-python3}
venv=.venv
export CMAKE_BUILD_PARALLEL_LEVEL=${SDPA_JOBS:-$(nproc)}
export PIP_DISABLE_PIP_VERSION_CHECK=1

if [ ! -x "$venv/bin/python" ]; then
  "$python" -m venv "$venv" || {
    echo "python: '$python -m venv' failed (on Debian: apt-get install python3-venv python3-dev)" >&2
    exit 1
  }
fi
# pip builds in an isolated environment with pyproject.toml's build requirements
# (scikit-build-core, nanobind), as `pip install .` does for anyone.
"$venv/bin/pip" install -q . pytest numpy

if [ "${SDPA_PY_TORCH:-1}" = 1 ] && ! "$venv/bin/python" -c "import torch" 2> /dev/null; then
  echo "python: installing torch into $venv (SDPA_PY_TORCH=0 skips this)"
  "$venv/bin/pip" install -q torch ||
    echo "python: WARNING: could not install torch; the torch tests will skip" >&2
fi

"$venv/bin/python" -m pytest tests/python -v -rs

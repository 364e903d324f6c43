#!/usr/bin/env bash
# python_test.sh — build the Python package's wheel the way a user does (pip wheel .), make it
# self-contained (auditwheel bundles the OpenMP runtime; fmt is compiled in), install it into
# the virtual environment .venv at the repository root and run the whole pytest suite
# (tests/python) against it, then install the same wheel into a fresh venv in a temporary
# directory outside the tree and run the suite's copy there.
#   The fresh venv gets only the wheel, numpy and pytest: the torch and transformers tests
#     skip there (installing torch again would cost minutes and ~5 GB); they run in .venv.
#   The venv's packages come from python_env.sh (pytest, numpy, the wheel tools; with
#     SDPA_PY_TORCH=1, the default, PyTorch and transformers for the comparisons with torch's
#     SDPA, the custom ops and the transformers backend; SDPA_PY_TORCH=0 leaves them out, and
#     those tests skip with the reason).
#   SDPA_JOBS limits build parallelism; PYTHON picks the interpreter (default python3).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
python=${PYTHON:-python3}
venv=.venv
export CMAKE_BUILD_PARALLEL_LEVEL=${SDPA_JOBS:-$(nproc)}
export PIP_DISABLE_PIP_VERSION_CHECK=1
bash scripts/python_env.sh

# The wheel: pip builds in an isolated environment with pyproject.toml's build requirements
# (scikit-build-core, nanobind), as `pip wheel .` does for anyone; auditwheel copies the
# shared libraries outside the manylinux policy (libgomp) into the wheel and retags it.
# scikit-build-core builds in build-wheel/ at the root, made afresh each time, rather than in a
# temporary folder: beside build/, so that a compiler cache given through the environment
# (CMAKE_CXX_COMPILER_LAUNCHER, CCACHE_BASEDIR: test.sh) sees the Release build's command lines.
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
rm -rf build-wheel
"$venv/bin/pip" wheel -q --no-deps --config-settings=build-dir=build-wheel -w "$work/raw" .
PATH="$root/$venv/bin:$PATH" "$venv/bin/auditwheel" repair -w "$work/wheelhouse" "$work"/raw/sdpa-*.whl | tail -n 1
wheel=$(echo "$work"/wheelhouse/sdpa-*.whl)
"$venv/bin/pip" install -q --force-reinstall --no-deps "$wheel"

"$venv/bin/python" -m pytest tests/python -v -rs

# The same wheel in a fresh venv elsewhere: nothing of the build tree on any path.
"$python" -m venv "$work/fresh"
"$work/fresh/bin/pip" install -q "$wheel" pytest
cp -r tests/python "$work/tests"
(cd "$work" && SDPA_TEST_INSTALLED_OUTSIDE="$root" fresh/bin/python -m pytest tests -q -rs -p no:cacheprovider)

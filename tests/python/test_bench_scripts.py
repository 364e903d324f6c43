"""The A/B and per-call bench scripts (bench/python_calls.py, omp_pools.py, mask_cost.py) run on tiny settings and
print figures of the shape their docs read, and refuse bad flags naming them. The package copy they are handed is
the one these tests import (its directory holds sdpa/), so an A/B here compares the package with itself."""
import pathlib
import re

import pytest

pytest.importorskip("torch", reason="PyTorch is not importable: the bench scripts need it "
                                    "(SDPA_PY_TORCH=1 bash scripts/python_test.sh installs torch in .venv)")

import sdpa  # noqa: E402
from repo_scripts import run_script  # noqa: E402

PACKAGE_DIR = str(pathlib.Path(sdpa.__file__).resolve().parents[1])
NUMBER = r"([0-9]+\.[0-9]+)"


def _ok(res):
    assert res.returncode == 0, res.stderr[-3000:]
    return res.stdout


def _refused(res, words):
    assert res.returncode == 2 and words in res.stderr, res.stderr[-2000:]


def test_python_calls_bench_runs():
    """Per-call cost of each case, sdpa and torch in the same process; then --ab over two copies of the package."""
    out = _ok(run_script("bench/python_calls.py", "--calls", 5, "--rounds", 1))
    for case in ("tiny", "decode", "train"):
        found = re.search(rf"sdpa +{case}: sdpa +{NUMBER} us  torch +{NUMBER} us", out)
        assert found and float(found[1]) > 0 and float(found[2]) > 0, out
    out = _ok(run_script("bench/python_calls.py", "--calls", 5, "--rounds", 2, "--cases", "decode", "--ab",
                         PACKAGE_DIR, PACKAGE_DIR))
    assert len(re.findall(rf"decode: sdpa +{NUMBER} us  torch +{NUMBER} us  \(torch/sdpa [0-9.]+x, 2 rounds\)",
                          out)) == 2, out
    _refused(run_script("bench/python_calls.py", "--cases", "tiny,nope"), "--cases: 'nope' is not a case")
    _refused(run_script("bench/python_calls.py", "--calls", 0), "--calls: must be >= 1, got 0")
    _refused(run_script("bench/python_calls.py", "--ab", PACKAGE_DIR, "/nonexistent"), "--ab '/nonexistent'")


def test_omp_pools_bench_runs():
    """A torch op and an attention call alternated, one process per configuration: each case's four halves timed,
    and the OpenMP runtimes the process mapped."""
    out = _ok(run_script("bench/omp_pools.py", "--pkg", f"a={PACKAGE_DIR}", "--rounds", 1, "--iters", 3,
                         "--passive"))
    assert re.search(r"a: \d+ threads at the end, \d+ libgomp mapped", out), out
    for config in ("a", "a+passive"):
        for case in ("train", "decode"):
            found = re.search(rf"^ +{re.escape(config)} +{case} \| +{NUMBER} +{NUMBER} \| +{NUMBER} +{NUMBER} \|",
                              out, re.M)
            assert found and all(float(found[i]) > 0 for i in range(1, 5)), out
    _refused(run_script("bench/omp_pools.py", "--pkg", f"a={PACKAGE_DIR}", "--cases", "nope"),
             "--cases: 'nope' is not a case")
    _refused(run_script("bench/omp_pools.py", "--pkg", f"a={PACKAGE_DIR}", "--iters", 0), "--iters: must be >= 1")
    _refused(run_script("bench/omp_pools.py", "--pkg", "a=/nonexistent"), "--pkg 'a=/nonexistent'")


def test_mask_cost_bench_runs():
    """Padded 4-d masks against is_causal, forward and forward+backward, and a decoding step with and without its
    padding mask, for two copies of the package alternated."""
    out = _ok(run_script("bench/mask_cost.py", "--pkg", f"a={PACKAGE_DIR}", "--pkg", f"b={PACKAGE_DIR}",
                         "--seq", 48, "--rounds", 2, "--reps", 1, "--batch", 2, "--heads", 2, "--dim", 16,
                         "--threads", 1, "--decode"))
    rows = ["N=48 forward padded 4-d mask", "N=48 forward is_causal", "N=48 forward+backward padded 4-d mask",
            "N=48 forward+backward is_causal", "decode step, left-padding mask (per step)",
            "decode step, no mask (per step)"]
    for row in rows:
        found = re.search(rf"^{re.escape(row)} +{NUMBER} +{NUMBER} +{NUMBER}$", out, re.M)
        assert found and float(found[1]) > 0 and float(found[2]) > 0, out
    _refused(run_script("bench/mask_cost.py", "--pkg", f"a={PACKAGE_DIR}", "--seq", 0), "--seq: each must be >= 1")
    _refused(run_script("bench/mask_cost.py", "--pkg", f"a={PACKAGE_DIR}", "--heads", 0), "--heads: must be >= 1")

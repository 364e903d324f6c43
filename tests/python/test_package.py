"""The installed package: one version number, type stubs, and (run from outside the tree by
scripts/python_test.sh, with SDPA_TEST_INSTALLED_OUTSIDE=<repository root>) a self-contained wheel."""

import ast
import importlib.metadata
import os
import pathlib
import re
import subprocess

import sdpa

PKG = pathlib.Path(sdpa.__file__).parent
TREE = pathlib.Path(__file__).resolve().parents[2]


def test_one_version_number():
    assert sdpa.__version__ == importlib.metadata.version("sdpa")
    cmake = TREE / "CMakeLists.txt"
    if cmake.exists():  # in the tree: the project() line is the one source
        assert re.search(r"project\(sdpa VERSION ([0-9.]+)", cmake.read_text()).group(1) == sdpa.__version__


def test_type_stubs_are_installed():
    assert (PKG / "py.typed").exists()
    stub = (PKG / "_ext.pyi").read_text()
    names = {n.name for n in ast.parse(stub).body if isinstance(n, ast.FunctionDef)}
    assert {"forward", "backward", "active_isa", "lab_run", "train_run"} <= names


def test_wheel_is_self_contained():
    root = os.environ.get("SDPA_TEST_INSTALLED_OUTSIDE")
    if not root:
        import pytest
        pytest.skip("run by scripts/python_test.sh on the wheel installed outside the tree")
    assert not str(PKG.resolve()).startswith(str(pathlib.Path(root).resolve()))
    ldd = subprocess.run(["ldd", sdpa._ext.__file__], capture_output=True, text=True, check=True).stdout
    assert "not found" not in ldd
    assert "libfmt" not in ldd  # compiled in (header-only)
    gomp = [line for line in ldd.splitlines() if "libgomp" in line]
    assert gomp and all("sdpa.libs" in line for line in gomp), ldd  # bundled by auditwheel

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


def _package_imports(module: pathlib.Path) -> set:
    """The sdpa modules a module imports, at its top or inside a function (a lazy import is still an edge)."""
    found = set()
    for node in ast.walk(ast.parse(module.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            if node.module:
                found.add(node.module.split(".")[0])
            else:
                found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("sdpa."):
            found.add(node.module.split(".")[1])
    return found


def test_the_modules_import_each_other_without_a_cycle():
    """_core (checks, options, kernel calls) imports no torch and no other Python module of the package; _ops
    (the custom ops) imports _core only; the public front _api picks between them. A cycle anywhere in the
    package's import graph, lazy imports included, fails."""
    graph = {p.stem: _package_imports(p) & {m.stem for m in PKG.glob("*.py")} for p in PKG.glob("*.py")}
    assert graph["_core"] == set()
    assert graph["_ops"] == {"_core"}
    core_tree = ast.parse((PKG / "_core.py").read_text())
    assert not any(isinstance(n, ast.Import) and any(a.name.split(".")[0] == "torch" for a in n.names)
                   for n in ast.walk(core_tree))
    state = {}

    def visit(m, path):
        if state.get(m) == "open":
            raise AssertionError("import cycle: " + " -> ".join(path + [m]))
        if state.get(m) == "done":
            return
        state[m] = "open"
        for n in sorted(graph.get(m, ())):
            visit(n, path + [m])
        state[m] = "done"

    for m in sorted(graph):
        visit(m, [])


def test_one_table_of_options():
    """sdpa._core.OPTIONS is every options-taking entry point's keyword list, and KERNEL_ARGS is what the binding
    takes: _options returns exactly its keys, in its order, and each kernel function of the extension names them
    among its arguments (and no other keyword beyond its arrays and explain)."""
    import inspect

    from sdpa import _core
    assert tuple(_core._options({})) == _core.KERNEL_ARG_NAMES
    names = [name for name, _ in _core.OPTIONS]
    for fn in (sdpa.attention, sdpa.reference_attention, sdpa.attention_backward, sdpa.attention_varlen,
               sdpa.explain):
        params = inspect.signature(fn).parameters
        assert [p for p in params if p in _core._OPTION_DEFAULTS] == names, fn.__name__
        assert all(params[p].default == _core._OPTION_DEFAULTS[p] for p in names)
    with __import__("pytest").raises(TypeError, match=r"attention_varlen\(\) got an unexpected keyword argument"):
        _core._options({"windw": (1, 0)}, caller="attention_varlen")
    # Beyond the table: the arrays each function reads and writes, and its own outputs (dsinks, explain).
    own = {"q", "k", "v", "out", "lse", "dout", "dq", "dk", "dv", "cu_seqlens_q", "cu_seqlens_k", "dsinks", "explain"}
    for kernel in ("forward", "backward", "forward_varlen", "backward_varlen"):
        doc = getattr(sdpa._ext, kernel).__doc__.splitlines()[0]
        args = set(re.findall(r"(?:\(|, )(\w+): ", doc))
        assert args - own == set(_core.KERNEL_ARG_NAMES), (kernel, args)

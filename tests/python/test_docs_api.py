"""docs/python.md's table of what the package holds names what it holds: every `sdpa.…` (and
`torch.ops.sdpa.…`) name in the table's first column resolves, and every parameter it shows in a call,
`sdpa.attention(q, k, v, *, return_lse, scale, ...)`, is a parameter of that callable. The docs' table is
the one list; the package is read by import and inspect.signature, never listed here."""

import importlib
import inspect
import pathlib
import re

import pytest

DOC = pathlib.Path(__file__).resolve().parents[2] / "docs" / "python.md"


def table_cells():
    """The first cells of the table under "## What is in it"."""
    if not DOC.exists():
        pytest.skip("docs/python.md is read from the source tree")
    text = DOC.read_text(encoding="utf-8")
    section = text.split("## What is in it", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    assert len(rows) >= 20, f"only {len(rows)} rows under 'What is in it': the table moved"
    return [row.split(" | ", 1)[0] for row in rows]


def resolve(dotted: str):
    """The object a dotted name names: the longest importable module prefix, then attributes."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for name in parts[cut:]:
            obj = getattr(obj, name)
        return obj
    raise ImportError(dotted)


def shown_parameters(args: str) -> list:
    """The parameter names a call in the docs shows: `q, k, v=None, *, scale, **options` -> q, k, v, scale
    (`*`, `...`, `**x` and the values after `=` are not names)."""
    names = []
    for piece in args.split(","):
        piece = piece.strip()
        if not piece or piece in ("*", "...") or piece.startswith("**"):
            continue
        names.append(piece.split("=", 1)[0].strip())
    return names


def test_every_name_in_the_table_is_in_the_package():
    pytest.importorskip("torch")  # the table names sdpa.torch, sdpa.transformers and torch.ops.sdpa
    pytest.importorskip("transformers")
    import sdpa.torch  # noqa: F401  registers torch.ops.sdpa
    import sdpa.transformers  # noqa: F401

    checked_names = checked_params = 0
    problems = []
    for cell in table_cells():
        module = None  # a bare name (`GrowingLayer`) belongs to the module of the cell's first dotted name
        for span in re.findall(r"`([^`]+)`", cell):
            m = re.fullmatch(r"([A-Za-z_][\w.]*)(?:\((.*)\))?", span.strip())
            if not m:
                continue  # a value such as `"exact_cpu"`
            dotted, args = m.group(1), m.group(2)
            if module is None and not dotted.startswith(("sdpa.", "torch.ops.sdpa.")):
                continue  # before the cell's first name of the package: not one
            if "." not in dotted:
                dotted = f"{module}.{dotted}"
            elif module is None:
                module = dotted.rsplit(".", 1)[0]
            try:
                obj = resolve(dotted)
            except (ImportError, AttributeError) as e:
                problems.append(f"{dotted}: not in the package ({e})")
                continue
            checked_names += 1
            if args is None:
                continue
            try:
                params = inspect.signature(obj).parameters
            except (TypeError, ValueError):
                problems.append(f"{dotted}: the docs show a call, but it has no signature to check")
                continue
            takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
            for name in shown_parameters(args):
                checked_params += 1
                if name not in params and not takes_any:
                    problems.append(f"{dotted}: no parameter {name!r} (it takes {', '.join(params)})")
    assert not problems, "docs/python.md's table against the package:\n" + "\n".join(problems)
    print(f"{checked_names} names and {checked_params} parameters of docs/python.md's table found in the package")
    assert checked_names >= 30 and checked_params >= 60, (checked_names, checked_params)

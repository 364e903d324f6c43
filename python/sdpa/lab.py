"""The lab from Python: each claim of the seed documents as a table (see docs/lab.md).

    >>> t = sdpa.lab.run("variance", seed=1, max_dk=64)
    >>> t.columns, t.rows[0], t["var"]           # a column as a NumPy array
    >>> t.verdict["verdict"], t.verdict["tolerance"]

The same C++ functions as ``sdpa lab <experiment>``, listed by the same registry; every
score, softmax and gradient comes from the library's kernel, and every verdict is decided
in C++ beside the numbers. Deterministic for a seed.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from . import _ext

__all__ = ["Table", "experiments", "describe", "run", "report"]

_DEFAULT_DISTS = ("gaussian", "uniform", "rademacher", "student_t5")


@dataclass(frozen=True)
class Table:
    """One experiment's result: a title, named columns, rows (dicts column -> value) and the
    claim-level verdict, a dict with the keys of the table's JSON (``sdpa lab X --format json``):
    verdict (e.g. "holds", "holds only for ..."), outcome ("holds", "fails" or "holds only"),
    expected, measured and tolerance."""

    name: str
    title: str
    columns: tuple
    rows: list = field(repr=False)
    verdict: dict = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.rows)

    def __iter__(self):
        return iter(self.rows)

    def __getitem__(self, column: str) -> np.ndarray:
        """The column as a NumPy array: int64 or float64 where every cell is a number, else object."""
        if column not in self.columns:
            raise KeyError(f"column {column!r} not in {self.name}'s columns {list(self.columns)}")
        cells = [r[column] for r in self.rows]
        if all(isinstance(c, int) for c in cells):
            return np.array(cells, dtype=np.int64)
        if all(isinstance(c, (int, float)) for c in cells):
            return np.array(cells, dtype=np.float64)
        return np.array(cells, dtype=object)

    def to_numpy(self) -> dict:
        """{column: NumPy array} for every column."""
        return {c: self[c] for c in self.columns}


def experiments() -> list:
    """Names of the experiments run() accepts, in the report's order."""
    return [e["name"] for e in _ext.lab_experiments()]


def describe(experiment: str) -> dict:
    """The registry's entry for one experiment: name, heading, seeds, help, claim, takes_dists."""
    for e in _ext.lab_experiments():
        if e["name"] == experiment:
            return dict(e)
    raise ValueError(f"experiment: unknown lab experiment {experiment!r} (known: {', '.join(experiments())})")


def report(*, seed: int = 1, samples: int = 0, threads: int = 0) -> dict:
    """Runs every experiment, as `sdpa lab report` does, and returns the report's document (what
    the CLI writes as lab.json): version, isa, seed, samples, and per experiment its table (name,
    title, columns, rows, verdict) with heading, seeds, discussion and seconds. samples: 0 runs each
    experiment at its defaults (tens of seconds); N > 0 a draft at N samples per experiment, as
    `sdpa lab report --samples N`, whose verdicts may not hold."""
    import json
    for name, val in (("seed", seed), ("samples", samples), ("threads", threads)):
        if isinstance(val, bool) or not isinstance(val, (int, np.integer)):
            raise TypeError(f"{name}: expected an int, got {val!r}")
    if seed < 0:
        raise ValueError(f"seed: must be >= 0, got {seed}")
    return json.loads(_ext.lab_report(int(seed), int(samples), int(threads)))


def run(experiment: str, *, seed: int = 1, samples: int = 0, threads: int = 0, dists=None,
        max_dk: int = 4096) -> Table:
    """Runs one lab experiment and returns its Table.

    seed: results are deterministic for a seed. samples: Monte-Carlo samples, trials or
    repetitions (0: the experiment's default). threads: 0 for all. dists and max_dk belong to
    'variance' only (distributions among gaussian, uniform, rademacher, student_t5; the largest
    d_k, powers of two from 1).
    """
    entry = describe(experiment)
    for name, val in (("seed", seed), ("samples", samples), ("threads", threads), ("max_dk", max_dk)):
        if isinstance(val, bool) or not isinstance(val, (int, np.integer)):
            raise TypeError(f"{name}: expected an int, got {val!r}")
    if seed < 0:
        raise ValueError(f"seed: must be >= 0, got {seed}")
    if not entry["takes_dists"] and (dists is not None or max_dk != 4096):
        takers = ", ".join(repr(e["name"]) for e in _ext.lab_experiments() if e["takes_dists"])
        raise ValueError(f"dists, max_dk: only the {takers} experiment takes them, not {experiment!r}")
    if dists is None:
        dists = _DEFAULT_DISTS
    if isinstance(dists, str):
        dists = (dists,)
    for d in dists:
        if d not in _DEFAULT_DISTS:
            raise ValueError(f"dists: unknown distribution {d!r} (known: {', '.join(_DEFAULT_DISTS)})")
    name, title, columns, rows, verdict = _ext.lab_run(experiment, int(seed), int(samples), int(threads),
                                                       [str(d) for d in dists], int(max_dk))
    columns = tuple(columns)
    return Table(name=name, title=title, columns=columns, rows=[dict(zip(columns, r)) for r in rows],
                 verdict=dict(verdict))

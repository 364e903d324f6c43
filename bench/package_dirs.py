"""The `--pkg NAME=DIR` argument of the A/B scripts (mask_cost.py, omp_pools.py): each DIR
holds one copy of the `sdpa` package (DIR/sdpa), run in its own process by PYTHONPATH."""
import os


def parse_package_dirs(ap, specs):
    """[(name, absolute dir)] from NAME=DIR strings; a bad one ends the script through
    argparse's error, naming it."""
    if not specs:
        ap.error("--pkg: give at least one NAME=DIR")
    out = []
    for spec in specs:
        name, sep, path = spec.partition("=")
        if not sep or not os.path.isdir(os.path.join(path, "sdpa")):
            ap.error(f"--pkg {spec!r}: expected NAME=DIR with DIR/sdpa a package directory")
        out.append((name, os.path.abspath(path)))
    return out

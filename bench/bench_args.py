"""The command-line checks the bench scripts share, standard library only: each refuses a bad flag through
argparse's error (exit 2), naming it. `--pkg NAME=DIR` is the A/B scripts' (mask_cost.py, omp_pools.py): each
DIR holds one copy of the `sdpa` package (DIR/sdpa), run in its own process by PYTHONPATH."""
import os


def check_positive(ap, a, *names):
    """Refuses a flag below 1; names as argparse keeps them (kv_heads)."""
    for name in names:
        if getattr(a, name) < 1:
            ap.error(f"--{name.replace('_', '-')}: must be >= 1, got {getattr(a, name)}")


def check_cases(ap, cases, known):
    """The --cases list (comma-separated) as names, each one of `known`."""
    names = cases.split(",")
    for name in names:
        if name not in known:
            ap.error(f"--cases: {name!r} is not a case; the cases are {','.join(known)}")
    return names


def is_package_dir(path):
    """Whether path holds a copy of the package (path/sdpa): a child run with it on PYTHONPATH would otherwise
    import the installed sdpa, and an A/B would compare a build with itself."""
    return os.path.isdir(os.path.join(path, "sdpa"))


def parse_package_dirs(ap, specs):
    """[(name, absolute dir)] from NAME=DIR strings."""
    if not specs:
        ap.error("--pkg: give at least one NAME=DIR")
    out = []
    for spec in specs:
        name, sep, path = spec.partition("=")
        if not sep or not is_package_dir(path):
            ap.error(f"--pkg {spec!r}: expected NAME=DIR with DIR/sdpa a package directory")
        out.append((name, os.path.abspath(path)))
    return out

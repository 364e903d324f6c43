"""Runs the repository's scripts (examples/, bench/) as a user would, with the Python running the tests."""
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]


def run_script(path, *args, timeout=300):
    """The script at `path` (relative to the root, e.g. "bench/hf_model.py") run with `args`; the CompletedProcess,
    its output captured as text."""
    return subprocess.run([sys.executable, str(ROOT / path), *map(str, args)], capture_output=True, text=True,
                          timeout=timeout)

"""Per-call cost of the Python package on small calls, against PyTorch's CPU SDPA in the same process.

    python bench/python_calls.py [--calls 2000] [--rounds 5] [--cases tiny,decode,train]
    python bench/python_calls.py --ab OLD_DIR NEW_DIR [...]   # alternate two builds of the package

Cases (float32, the process's torch thread count; docs/python.md, "Small calls"):
  tiny    sdpa.torch.scaled_dot_product_attention, q (1, 8, 1, 64), k, v (1, 8, 64, 64), under no_grad
  decode  the same drop-in at a Hugging Face decoding step: q a (1, 12, 1, 64) view of a (1, 1, 12, 64)
          projection, k, v (1, 4, 1100, 64) (a KV cache), enable_gqa, under no_grad
  train   forward + backward through the custom ops: q, k, v (2, 4, 128, 32) requiring grad,
          out.backward(dout)
Each round times `calls` calls of sdpa and then of torch (after 50 warm-up calls of each) and prints
µs per call; the summary line gives the medians over rounds. With --ab the rounds alternate
between two copies of the package (each a directory holding the package `sdpa/`: its .py files and
the built _ext*.so), one subprocess per round and copy, so both meet the same host load; labelled by
their directories' names (with #1 and #2 where those are the same: one directory twice is an A/A run,
the host's noise alone).
"""
import argparse
import os
import statistics
import subprocess
import sys
import time

from bench_args import check_cases, check_positive, is_package_dir


def _cases(torch):
    F = torch.nn.functional
    gen = torch.Generator().manual_seed(1)

    def randn(*shape, grad=False):
        return torch.randn(*shape, generator=gen).requires_grad_(grad)

    def tiny():
        q, k, v = randn(1, 8, 1, 64), randn(1, 8, 64, 64), randn(1, 8, 64, 64)
        return (lambda f: f(q, k, v)), True

    def decode():
        q = randn(1, 1, 12, 64).transpose(1, 2)
        k, v = randn(1, 4, 1100, 64), randn(1, 4, 1100, 64)
        return (lambda f: f(q, k, v, enable_gqa=True)), True

    def train():
        q, k, v = (randn(2, 4, 128, 32, grad=True) for _ in range(3))
        dout = randn(2, 4, 128, 32)

        def call(f):
            f(q, k, v).backward(dout)
        return call, False

    return {"tiny": tiny, "decode": decode, "train": train}


CASES = ("tiny", "decode", "train")


def run_rounds(args):
    """One process: `rounds` rounds of each case, sdpa then torch; prints one line per (case, round)."""
    import torch
    import sdpa.torch as st
    ours, theirs = st.scaled_dot_product_attention, torch.nn.functional.scaled_dot_product_attention
    cases = _cases(torch)
    for name in args.cases.split(","):
        call, no_grad = cases[name]()
        for _ in range(args.rounds):
            row = []
            for f in (ours, theirs):
                with torch.no_grad() if no_grad else torch.enable_grad():
                    for _ in range(50):
                        call(f)
                    t0 = time.perf_counter()
                    for _ in range(args.calls):
                        call(f)
                    row.append((time.perf_counter() - t0) / args.calls * 1e6)
            print(f"{name} {row[0]:.2f} {row[1]:.2f}", flush=True)


def summarise(label, lines):
    by_case = {}
    for line in lines:
        name, a, b = line.split()
        by_case.setdefault(name, []).append((float(a), float(b)))
    for name, rows in by_case.items():
        s, t = statistics.median(r[0] for r in rows), statistics.median(r[1] for r in rows)
        print(f"{label:>10} {name:>7}: sdpa {s:8.2f} us  torch {t:8.2f} us  (torch/sdpa {t / s:.2f}x, "
              f"{len(rows)} rounds)")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--cases", default="tiny,decode,train")
    ap.add_argument("--ab", nargs=2, metavar=("OLD_DIR", "NEW_DIR"))
    args = ap.parse_args()
    check_positive(ap, args, "calls", "rounds")
    check_cases(ap, args.cases, CASES)
    for d in args.ab or ():
        if not is_package_dir(d):
            ap.error(f"--ab {d!r}: expected a directory holding a copy of the package (DIR/sdpa)")
    if not args.ab:
        import io
        import contextlib
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            run_rounds(args)
        print(buf.getvalue(), end="")
        summarise("sdpa", buf.getvalue().splitlines())
        return
    labels = [os.path.basename(os.path.normpath(d)) for d in args.ab]
    if labels[0] == labels[1]:  # the same directory twice (an A/A run: the noise alone), or two of one name
        labels = [f"{label}#{i + 1}" for i, label in enumerate(labels)]
    lines = {label: [] for label in labels}
    copies = list(zip(labels, args.ab))
    for r in range(args.rounds):
        for label, d in copies if r % 2 == 0 else reversed(copies):
            env = dict(os.environ, PYTHONPATH=os.path.abspath(d))
            cmd = [sys.executable, os.path.abspath(__file__), "--calls", str(args.calls), "--rounds", "1",
                   "--cases", args.cases]
            out = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True).stdout
            got = [ln for ln in out.splitlines() if ln.split()[:1] and ln.split()[0] in CASES]
            print(f"round {r} {label}: " + "; ".join(got), flush=True)
            lines[label].extend(got)
    for label in labels:
        summarise(label, lines[label])


if __name__ == "__main__":
    main()

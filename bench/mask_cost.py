"""What an explicit mask costs: Hugging Face's padded-batch masks against the structure they hold, and one sdpa build
against another, alternately.

    flock /tmp/sdpa-cpu.lock python3 bench/mask_cost.py --pkg old=/tmp/old --pkg new=/tmp/new [--threads 2]
        [--seq 1024 2048] [--rounds 5] [--dtype float32] [--decode]

Each --pkg NAME=DIR is a directory holding an `sdpa` package (python/sdpa/*.py and the built _ext*.so copied
there); each round runs every package once, in a fresh process, in the order A B, then B A, and so on, and every
figure is the median over the rounds of the per-round medians (--reps calls each, after one warm-up).

Rows (B = 4, H = 8, D = 64 unless --batch/--heads/--dim say otherwise):
  padded 4-d mask   causal with per-sequence left padding of different lengths (0, N/8, N/4, 3N/8 keys), as one
                    (B, 1, N, N) bool mask — what transformers' sdpa_mask builds for a padded batch;
  is_causal         the same call with is_causal and no mask: the floor (the structure without the padding);
forward and forward+backward. With --decode: batched generation, one query per sequence, B = 4, Hq = 12,
Hkv = 4, Nk = 1100 keys with left padding as a (B, 1, 1, Nk) bool mask, against the same step without a mask.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

from bench_args import check_positive, parse_package_dirs


def worker(a):
    import torch

    import sdpa
    from sdpa.torch import scaled_dot_product_attention as attend

    torch.manual_seed(0)
    dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16}[a.dtype]
    rows = {}

    def timed(name, fn, reps):
        fn()  # warm-up
        t = []
        for _ in range(reps):
            s = time.perf_counter()
            fn()
            t.append(time.perf_counter() - s)
        rows[name] = statistics.median(t)

    B, H, D = a.batch, a.heads, a.dim
    for n in a.seq:
        pads = [n * s // 8 for s in range(B)]
        keep = torch.ones(B, 1, n, n, dtype=torch.bool).tril()
        for b, p in enumerate(pads):
            keep[b, :, :, :p] = False
        q, k, v = (torch.randn(B, H, n, D, dtype=dtype, requires_grad=True) for _ in range(3))
        dout = torch.randn(B, H, n, D, dtype=dtype)

        def fwd(mask, causal):
            with torch.no_grad():
                attend(q, k, v, attn_mask=mask, is_causal=causal)

        def fwd_bwd(mask, causal):
            out = attend(q, k, v, attn_mask=mask, is_causal=causal)
            torch.autograd.grad(out, (q, k, v), dout)

        for pass_name, fn in (("forward", fwd), ("forward+backward", fwd_bwd)):
            timed(f"N={n} {pass_name} padded 4-d mask", lambda: fn(keep, False), a.reps)
            timed(f"N={n} {pass_name} is_causal", lambda: fn(None, True), a.reps)
    if a.decode:
        Bd, Hq, Hkv, Nk, Dd = 4, 12, 4, 1100, 64
        q = torch.randn(Bd, Hq, 1, Dd, dtype=dtype)
        k, v = (torch.randn(Bd, Hkv, Nk, Dd, dtype=dtype) for _ in range(2))
        keep = torch.ones(Bd, 1, 1, Nk, dtype=torch.bool)
        for b, p in enumerate([0, 37, 150, 400]):
            keep[b, :, :, :p] = False
        steps = 200  # one figure: the mean of a batch of steps (a step is tens of microseconds)

        def decode(mask):
            for _ in range(steps):
                attend(q, k, v, attn_mask=mask, enable_gqa=True)

        timed("decode step, left-padding mask (per step)", lambda: decode(keep), a.reps)
        timed("decode step, no mask (per step)", lambda: decode(None), a.reps)
        for name in list(rows):
            if name.startswith("decode"):
                rows[name] /= steps
    print(json.dumps({"threads": a.threads, "isa": sdpa.active_isa() if hasattr(sdpa, "active_isa") else "",
                      "rows": rows}))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pkg", action="append", default=[], help="NAME=DIR holding an sdpa package; twice or more")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seq", type=int, nargs="+", default=[1024, 2048])
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--decode", action="store_true")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        return worker(a)
    pkgs = parse_package_dirs(ap, a.pkg)
    check_positive(ap, a, "threads", "rounds", "reps", "batch", "heads", "dim")
    if min(a.seq) < 1:
        ap.error(f"--seq: each must be >= 1, got {' '.join(map(str, a.seq))}")
    args = [sys.executable, os.path.abspath(__file__), "--worker", "--threads", str(a.threads), "--dtype", a.dtype,
            "--batch", str(a.batch), "--heads", str(a.heads), "--dim", str(a.dim), "--reps", str(a.reps),
            "--seq", *map(str, a.seq)] + (["--decode"] if a.decode else [])
    runs = {name: [] for name, _ in pkgs}
    for r in range(a.rounds):
        for name, path in (pkgs if r % 2 == 0 else pkgs[::-1]):
            env = dict(os.environ, PYTHONPATH=path, OMP_NUM_THREADS=str(a.threads))
            out = subprocess.run(args, env=env, check=True, capture_output=True, text=True).stdout
            runs[name].append(json.loads(out.strip().splitlines()[-1])["rows"])
    names = list(runs[pkgs[0][0]][0])
    print(f"{a.dtype}, {a.threads} thread(s), B={a.batch} H={a.heads} D={a.dim}; medians (ms) of {a.rounds} "
          f"alternating rounds of {a.reps} calls")
    head = "".join(f"{n:>12}" for n, _ in pkgs)
    print(f"{'row':<48}{head}" + (f"{pkgs[0][0] + '/' + pkgs[-1][0]:>12}" if len(pkgs) > 1 else ""))
    for row in names:
        med = [statistics.median(x[row] for x in runs[n]) for n, _ in pkgs]
        ratio = f"{med[0] / med[-1]:>12.2f}" if len(pkgs) > 1 else ""
        print(f"{row:<48}" + "".join(f"{1e3 * m:>12.3f}" for m in med) + ratio)


if __name__ == "__main__":
    main()

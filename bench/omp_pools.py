"""Two OpenMP runtimes in one torch process: a loop that alternates a torch op and an attention call.

    python bench/omp_pools.py --pkg NAME=DIR [--pkg NAME=DIR ...] [--passive] [--rounds 5] [--iters 300]

Each DIR holds the package `sdpa/` (its .py files and the built _ext*.so; an unpacked wheel also holds its
`sdpa.libs/`), put first on PYTHONPATH. Every (package, wait policy) pair is one configuration; --passive adds
each package again under OMP_WAIT_POLICY=passive (libgomp's workers then sleep at once after a parallel region
instead of spinning first). A round runs every configuration once, each in its own process (torch imported
first, then sdpa, as a model's code does), in an order that alternates from round to round, so all meet the
same host load; the summary gives medians over rounds.

In a process, per case, the loop body is: a torch matmul of the case's model size (torch runs it on its
threads), then an attention call; the two halves are timed apart. The attention is sdpa's drop-in
sdpa.torch.scaled_dot_product_attention, then (in a second loop, the baseline) torch's own
F.scaled_dot_product_attention. Cases (float32, torch's thread count):
  train   q, k, v (2, 4, 128, 32) requiring grad, forward + out.backward(dout) (bench/python_calls.py's
          train); torch op: (256, 512) @ (512, 512)
  decode  q a (1, 12, 1, 64) view of a (1, 1, 12, 64) projection, k, v (1, 4, 1100, 64), enable_gqa, no grad
          (bench/python_calls.py's decode); torch op: (1, 768) @ (768, 3072), one token through an MLP's
          up-projection
Each process also prints the libgomp files /proc/self/maps shows after the imports (one runtime or two).
"""
import argparse
import os
import statistics
import subprocess
import sys
import time

from bench_args import check_cases, check_positive, parse_package_dirs

CASES = ("train", "decode")


def mapped_libgomp():
    """The distinct libgomp files mapped into this process (each is one OpenMP runtime)."""
    with open("/proc/self/maps") as maps:
        paths = {line.split()[-1] for line in maps if "libgomp" in line.rsplit("/", 1)[-1]}
    return sorted(paths)


def _cases(torch):
    gen = torch.Generator().manual_seed(1)

    def randn(*shape, grad=False):
        return torch.randn(*shape, generator=gen).requires_grad_(grad)

    def train():
        q, k, v = (randn(2, 4, 128, 32, grad=True) for _ in range(3))
        dout = randn(2, 4, 128, 32)
        a, b = randn(256, 512), randn(512, 512)

        def attend(f):
            f(q, k, v).backward(dout)
        return (lambda: torch.mm(a, b)), attend, torch.enable_grad

    def decode():
        q = randn(1, 1, 12, 64).transpose(1, 2)
        k, v = randn(1, 4, 1100, 64), randn(1, 4, 1100, 64)
        x, w = randn(1, 768), randn(768, 3072)
        return (lambda: torch.mm(x, w)), (lambda f: f(q, k, v, enable_gqa=True)), torch.no_grad

    return {"train": train, "decode": decode}


def run_one(args):
    """One process, one round: per case and attention, `iters` loop bodies; prints µs per body for each half."""
    import torch
    import sdpa.torch as st
    print("libgomp " + " ".join(mapped_libgomp()), flush=True)
    attentions = {"sdpa": st.scaled_dot_product_attention, "torch": torch.nn.functional.scaled_dot_product_attention}
    cases = _cases(torch)
    for name in args.cases.split(","):
        op, attend, mode = cases[name]()
        for label, f in attentions.items():
            with mode():
                for _ in range(30):
                    op()
                    attend(f)
                op_s = attn_s = 0.0
                for _ in range(args.iters):
                    t0 = time.perf_counter()
                    op()
                    t1 = time.perf_counter()
                    attend(f)
                    t2 = time.perf_counter()
                    op_s += t1 - t0
                    attn_s += t2 - t1
            print(f"{name} {label} {op_s / args.iters * 1e6:.2f} {attn_s / args.iters * 1e6:.2f}", flush=True)
    print(f"threads {len(os.listdir('/proc/self/task'))}", flush=True)  # a second runtime adds its own workers


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pkg", action="append", default=[], metavar="NAME=DIR")
    ap.add_argument("--passive", action="store_true", help="also run each package under OMP_WAIT_POLICY=passive")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--iters", type=int, default=300)
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument("--one", action="store_true", help=argparse.SUPPRESS)  # a child: one round in this process
    args = ap.parse_args()
    if args.one:
        run_one(args)
        return
    check_positive(ap, args, "rounds", "iters")
    check_cases(ap, args.cases, CASES)
    configs = []
    for name, d in parse_package_dirs(ap, args.pkg):
        configs.append((name, d, {}))
        if args.passive:
            configs.append((name + "+passive", d, {"OMP_WAIT_POLICY": "passive"}))
    rows = {c[0]: {} for c in configs}  # config -> (case, attention) -> [(op µs, attention µs)]
    maps, threads = {}, {}
    for r in range(args.rounds):
        order = configs if r % 2 == 0 else configs[::-1]
        for name, d, extra in order:
            env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}  # only the config sets it
            env.update(PYTHONPATH=d, **extra)
            cmd = [sys.executable, os.path.abspath(__file__), "--one", "--iters", str(args.iters),
                   "--cases", args.cases]
            out = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True).stdout
            for line in out.splitlines():
                word = line.split()
                if word[0] == "libgomp":
                    maps[name] = word[1:]
                elif word[0] == "threads":
                    threads[name] = word[1]
                elif word[0] in CASES:
                    rows[name].setdefault((word[0], word[1]), []).append((float(word[2]), float(word[3])))
            print(f"round {r} {name}: " + "; ".join(ln for ln in out.splitlines() if ln.split()[0] in CASES),
                  flush=True)
    print()
    for name, _, _ in configs:
        print(f"{name}: {threads[name]} threads at the end, {len(maps[name])} libgomp mapped: {' '.join(maps[name])}")
    # Host load moves every figure of a process alike, so the ratios within a process (sdpa's loop over the
    # baseline loop, in the same process) are steadier than the times; their medians are given too.
    print(f"\nmedians over {args.rounds} rounds, µs per loop-body half; ratios: sdpa's loop / the baseline's")
    print(f"{'config':>16} {'case':>7} | {'op before sdpa':>14} {'sdpa':>9} | {'op before torch':>15} {'torch':>9} |"
          f" {'op ratio':>8} {'attn ratio':>10}")
    for name, _, _ in configs:
        for case in args.cases.split(","):
            ours, base = rows[name][(case, "sdpa")], rows[name][(case, "torch")]
            med = [statistics.median(x[i] for x in runs) for runs in (ours, base) for i in (0, 1)]
            ratio = [statistics.median(o[i] / b[i] for o, b in zip(ours, base)) for i in (0, 1)]
            print(f"{name:>16} {case:>7} | {med[0]:14.1f} {med[1]:9.1f} | {med[2]:15.1f} {med[3]:9.1f} |"
                  f" {ratio[0]:8.3f} {ratio[1]:10.3f}")


if __name__ == "__main__":
    main()

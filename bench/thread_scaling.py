"""Thread scaling: the suite's main shapes at 1, 2, 4, ... threads against PyTorch, and the KV-cache suite.

    python3 bench/thread_scaling.py [--sdpa build/bin/sdpa] [--threads 1,2,4,8,16] [--out scaling.json]
                                    [--no-kvcache]

Each (shape, thread count) is one `sdpa bench --format json` process: its own FMA peak on those threads,
its own PyTorch timing right after ours with the same thread count (bench/torch_sdpa.py, run by
$SDPA_TORCH_PYTHON or python3), by the timing rule of docs/performance.md. Thread counts run in an order
that alternates from shape to shape (up, then down), so a host that slows down mid-run does not lean on
one end of every curve. Then the KV-cache suite (`--suite kvcache`) at the most threads: its
one-sequence rows against a plain read, and its 64-sequence batch in one call against one call per
sequence. The output: every row's JSON in --out, and a table per shape on stdout (median, GFLOP/s,
share of the same run's FMA peak on those threads, speedup over one thread, PyTorch's median over ours).
Only the standard library: it runs under any Python 3 (torch is needed by the PyTorch comparison alone).
"""
import argparse
import json
import os
import subprocess
import sys
import time

# (name, sdpa bench arguments): fp32 forward, causal forward, backward, one-token decoding, bf16 forward.
SHAPES = [
    ("fwd fp32 H8 N2048 D128", ["--heads", "8", "--seq", "2048", "--dim", "128"]),
    ("causal fp32 H8 N4096 D64", ["--heads", "8", "--seq", "4096", "--dim", "64", "--causal"]),
    ("bwd fp32 H8 N2048 D64", ["--heads", "8", "--seq", "2048", "--dim", "64", "--backward"]),
    ("decode fp32 H32/8 Nk32768 D128",
     ["--heads", "32", "--kv-heads", "8", "--seq", "1", "--kv-seq", "32768", "--dim", "128"]),
    ("fwd bf16 H8 N2048 D64", ["--heads", "8", "--seq", "2048", "--dim", "64", "--dtype", "bfloat16"]),
]


def run_bench(sdpa, args):
    cmd = [sdpa, "bench", "--format", "json", *args]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"thread_scaling: {' '.join(cmd)} failed ({done.returncode}): {done.stderr.strip()[-400:]}")
    return json.loads(done.stdout)


def fmt_ratio(x):
    return f"{x:.2f}" if x else "-"


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sdpa", default="build/bin/sdpa", help="the sdpa executable")
    p.add_argument("--threads", default="", help="thread counts, e.g. 1,2,4,8,16 (default: 1 doubling to nproc)")
    p.add_argument("--out", default="thread_scaling.json", help="every row's JSON")
    p.add_argument("--no-kvcache", action="store_true", help="skip the KV-cache suite")
    a = p.parse_args()
    if a.threads:
        try:
            threads = [int(t) for t in a.threads.split(",")]
        except ValueError:
            sys.exit(f"--threads: expected counts like 1,2,4, got '{a.threads}'")
        if any(t < 1 for t in threads):
            sys.exit("--threads: each count must be at least 1")
    else:
        n, threads = os.cpu_count() or 1, [1]
        while threads[-1] * 2 <= n:
            threads.append(threads[-1] * 2)
        if threads[-1] != n:
            threads.append(n)
    if not os.access(a.sdpa, os.X_OK):
        sys.exit(f"--sdpa: '{a.sdpa}' is not an executable (build it first: scripts/build.sh)")

    rows, kv, start = [], [], time.time()

    def save():  # after every process, so that a run cut short keeps what it measured
        with open(a.out, "w") as f:
            json.dump({"rows": rows, "kvcache": kv}, f, indent=1)

    for i, (name, args) in enumerate(SHAPES):
        for t in threads if i % 2 == 0 else threads[::-1]:
            for r in run_bench(a.sdpa, [*args, "--threads", str(t), "--no-blas"]):
                r["shape_name"] = name
                rows.append(r)
            save()
            print(f"[{time.time() - start:6.1f} s] {name}: {t} threads", file=sys.stderr, flush=True)
    if not a.no_kvcache:
        kv = run_bench(a.sdpa, ["--suite", "kvcache", "--threads", str(max(threads))])
        save()
        print(f"[{time.time() - start:6.1f} s] kvcache suite: {max(threads)} threads", file=sys.stderr, flush=True)

    for name, _ in SHAPES:
        mine = sorted((r for r in rows if r["shape_name"] == name), key=lambda r: r["threads"])
        one = next((r["seconds_median"] for r in mine if r["threads"] == 1), None)
        print(f"\n{name} (isa {mine[0]['isa']})")
        print("| threads | ms | GFLOP/s | % peak | peak cores' worth | × 1 thread | × torch | probe |")
        print("|---|---|---|---|---|---|---|---|")
        for r in mine:
            share = (f"{100 * r['fraction_of_read']:.0f} % read" if r["decoding"]
                     else f"{100 * r['fraction_of_peak']:.1f} %")
            busy = " BUSY" if r["host_busy"] else ""
            probe = r["probe_gflops"] / r["peak_gflops"] if r["peak_gflops"] else 0
            print(f"| {r['threads']} | {1e3 * r['seconds_median']:.3f} | {r['gflops']:.1f} | {share} "
                  f"| {r['peak_cores_worth']:.2f} | {fmt_ratio(one / r['seconds_median'] if one else 0)} "
                  f"| {fmt_ratio(r['speedup_vs_torch'])} | {100 * probe:.0f} %{busy} |")
    if kv:
        print(f"\nkvcache suite, {max(threads)} threads (isa {kv[0]['isa']})")
        print("| pass | keys | ms | % read | tokens/s | × one call per sequence |")
        print("|---|---|---|---|---|---|")
        for r in kv:
            print(f"| {r['pass']} | {r['seq_k']} | {1e3 * r['seconds_median']:.3f} | {100 * r['fraction_of_read']:.1f} "
                  f"| {r['tokens_per_s']:.0f} | {fmt_ratio(r['speedup_vs_one_at_a_time'])} |")


if __name__ == "__main__":
    main()

"""Whether two sweep.json files hold the same results: the one comparison of the sweep tests
(tests/cli/cli_test.sh, tests/distributed/ring_cli_test.sh).

  sweep_json_same.py A B [--spread] [--runs N] [--min-from-store N]

Timings (and, with --spread, how the work was spread: jobs, threads, ranks) are left out;
everything else must be equal. --runs: A holds exactly N runs; --min-from-store: B loaded at
least N runs from its store. Exit status 1 with the differing keys otherwise. Debian's python3.
"""
import argparse
import json
import sys

TIMINGS = ("seconds", "train_seconds", "table", "runs_from_store")
SPREAD = ("jobs", "threads", "ranks")


def strip(path, spread):
    d = json.load(open(path))
    for k in TIMINGS + (SPREAD if spread else ()):
        d.pop(k)
    for run in d["runs"]:
        for k in ("seconds", "tokens_per_s"):
            run["final"].pop(k)
        for row in run["log"]:
            row.pop("tokens_per_s")
            row.pop("elapsed_s")
    return d


def main():
    p = argparse.ArgumentParser()
    p.add_argument("a")
    p.add_argument("b")
    p.add_argument("--spread", action="store_true")
    p.add_argument("--runs", type=int)
    p.add_argument("--min-from-store", type=int)
    args = p.parse_args()
    a, b = strip(args.a, args.spread), strip(args.b, args.spread)
    if args.runs is not None and len(a["runs"]) != args.runs:
        sys.exit(f"{args.a}: {len(a['runs'])} runs, expected {args.runs}")
    if a != b:
        sys.exit(f"differ in: {[k for k in a if a[k] != b.get(k)]}")
    if args.min_from_store is not None and json.load(open(args.b))["runs_from_store"] < args.min_from_store:
        sys.exit(f"{args.b}: fewer than {args.min_from_store} runs from the store")


if __name__ == "__main__":
    main()

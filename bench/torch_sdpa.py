"""Times PyTorch's CPU torch.nn.functional.scaled_dot_product_attention for `sdpa bench`.

Run by the executable as `python torch_sdpa.py` (an argument vector, no shell; see
src/bench/torch.hpp, which states the request and the reply). Reads one JSON request on
stdin and prints one JSON reply on stdout:

  request: {"threads": T, "rule": {"warmup_runs", "min_runs", "min_seconds", "max_runs"},
            "rows": [{"B", "Hq", "Hkv", "Nq", "Nk", "Dk", "Dv", "causal", "backward", "dtype", "dropout_p",
                      "key_padding"}, ...]}
  reply:   {"torch": version, "rows": [{"median_seconds": s, "runs": n}, ...]}
           or {"error": "..."} when torch cannot be imported

Each row is timed by the rule sdpa is timed by (src/bench/timer.hpp; docs/performance.md,
"Method"): `time_by_rule` below is that loop, nothing else. Inputs are standard normal in
the row's dtype ("float32", "bfloat16" or "float16"; float32 when absent); `causal` is torch's
is_causal (top-left), `dropout_p` its dropout_p (absent: 0); `key_padding` (absent or null:
no mask) the padded keys of each batch item, which make one bool attn_mask (B, 1, Nq, Nk) —
`causal` folded in, is_causal False — the keep mask sdpa times (src/bench/suite.hpp, Case::mask);
a backward row times torch.autograd.grad of a fresh forward, the forward outside the timer.
"""
import json
import statistics
import sys
import time


def time_by_rule(rule, run_once):
    """The TimerRule of src/bench/timer.hpp. run_once() makes one call and returns its
    seconds. Returns (median seconds, timed runs)."""
    for _ in range(rule["warmup_runs"]):
        run_once()
    times = []
    total = 0.0
    while True:
        t = run_once()
        times.append(t)
        total += t
        n = len(times)
        if n >= rule["min_runs"] and (total >= rule["min_seconds"] or n >= rule["max_runs"]):
            break
    return statistics.median(times), len(times)


def timed(fn):
    """A run_once that times all of fn()."""
    def run_once():
        t0 = time.perf_counter()
        fn()
        return time.perf_counter() - t0
    return run_once


def main():
    request = json.load(sys.stdin)
    try:
        import torch
        import torch.nn.functional as F
    except Exception as e:  # noqa: BLE001 - any import failure means "not available"
        print(json.dumps({"error": f"import torch failed: {type(e).__name__}: {e}"}))
        return 0
    rule = request["rule"]
    torch.set_num_threads(int(request["threads"]))
    gen = torch.Generator().manual_seed(1)
    rows = []
    for r in request["rows"]:
        dtype = getattr(torch, r.get("dtype", "float32"))

        def make(h, n, d):
            return torch.randn(r["B"], h, n, d, generator=gen, dtype=torch.float32).to(dtype)

        q, k, v = make(r["Hq"], r["Nq"], r["Dk"]), make(r["Hkv"], r["Nk"], r["Dk"]), make(r["Hkv"], r["Nk"], r["Dv"])
        gqa = r["Hq"] != r["Hkv"]
        keep, causal = None, r["causal"]
        if r.get("key_padding") is not None:  # sdpa's keep mask: causal ∧ the padded keys hidden
            keep = torch.ones(r["B"], 1, r["Nq"], r["Nk"], dtype=torch.bool)
            if causal:
                keep = keep.tril()  # row i keeps keys j ≤ i: is_causal's top-left diagonal
            for b, pad in enumerate(r["key_padding"]):
                keep[b, :, :, :pad] = False
            causal = False

        def attention(q, k, v):
            return F.scaled_dot_product_attention(q, k, v, attn_mask=keep, is_causal=causal, enable_gqa=gqa,
                                                  dropout_p=r.get("dropout_p", 0.0))

        if not r["backward"]:
            def forward():
                with torch.no_grad():
                    attention(q, k, v)

            run_once = timed(forward)
        else:
            qg, kg, vg = (x.clone().requires_grad_(True) for x in (q, k, v))
            dout = make(r["Hq"], r["Nq"], r["Dv"])

            def run_once():  # a fresh forward graph each run, outside the timer
                out = attention(qg, kg, vg)
                t0 = time.perf_counter()
                torch.autograd.grad(out, (qg, kg, vg), dout)
                return time.perf_counter() - t0

        seconds, runs = time_by_rule(rule, run_once)
        rows.append({"median_seconds": seconds, "runs": runs})
    print(json.dumps({"torch": torch.__version__, "rows": rows}))
    return 0


if __name__ == "__main__":
    sys.exit(main())

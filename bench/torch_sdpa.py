"""Times PyTorch's CPU torch.nn.functional.scaled_dot_product_attention for `sdpa bench`.

Reads one JSON object on stdin: {"threads": T, "rows": [{"B", "Hq", "Hkv", "Nq", "Nk",
"Dk", "Dv", "causal", "backward", "repeat"}, ...]} and prints one JSON object on stdout:
{"torch": version, "rows": [{"forward": seconds, "backward": seconds | null}, ...]}, the
medians of `repeat` runs after one warm-up, inputs float32 standard normal, or
{"error": "..."} when torch cannot be imported. `causal` means torch's is_causal
(top-left). The backward is timed alone: torch.autograd.grad of a saved forward.
"""
import json
import statistics
import sys
import time


def time_runs(fn, repeat):
    fn()  # warm-up
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main():
    request = json.load(sys.stdin)
    try:
        import torch
        import torch.nn.functional as F
    except Exception as e:  # noqa: BLE001 - any import failure means "not available"
        print(json.dumps({"error": f"import torch failed: {type(e).__name__}: {e}"}))
        return 0
    torch.set_num_threads(int(request["threads"]))
    gen = torch.Generator().manual_seed(1)
    rows = []
    for r in request["rows"]:
        def make(h, n, d):
            return torch.randn(r["B"], h, n, d, generator=gen, dtype=torch.float32)

        q, k, v = make(r["Hq"], r["Nq"], r["Dk"]), make(r["Hkv"], r["Nk"], r["Dk"]), make(r["Hkv"], r["Nk"], r["Dv"])
        gqa = r["Hq"] != r["Hkv"]

        def fwd():
            with torch.no_grad():
                return F.scaled_dot_product_attention(q, k, v, is_causal=r["causal"], enable_gqa=gqa)

        row = {"forward": time_runs(fwd, r["repeat"]), "backward": None}
        if r["backward"]:
            qg, kg, vg = (x.clone().requires_grad_(True) for x in (q, k, v))
            dout = make(r["Hq"], r["Nq"], r["Dv"])

            def bwd():
                out = F.scaled_dot_product_attention(qg, kg, vg, is_causal=r["causal"], enable_gqa=gqa)
                return out

            # time only the backward: a fresh forward graph each run, outside the timer
            def timed_backward():
                out = bwd()
                t0 = time.perf_counter()
                torch.autograd.grad(out, (qg, kg, vg), dout)
                return time.perf_counter() - t0

            timed_backward()
            row["backward"] = statistics.median(timed_backward() for _ in range(r["repeat"]))
        rows.append(row)
    print(json.dumps({"torch": torch.__version__, "rows": rows}))
    return 0


if __name__ == "__main__":
    sys.exit(main())

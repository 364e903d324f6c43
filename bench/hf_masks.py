"""A sliding-window model's prefill with sdpa's mask builder against transformers' own: the same "exact_cpu"
attention, handed either sdpa.transformers.build_mask's PatternMask (the window said as kernel options, no booleans
formed) or transformers' masking_utils.sdpa_mask (the [B, 1, N, N] booleans formed, then read by the kernel).

    flock /tmp/sdpa-cpu.lock .venv/bin/python bench/hf_masks.py [--prefill 16384 --window 1024 --layers 2
                                                                 --rounds 3 --threads 2]

The model is bench/hf_llama.py's with a sliding window on every layer (Mistral's config); one forward over
--prefill tokens without a cache, the logits of the last position only. The two mask builders are timed
alternately (A B, then B A, ...) on the same model after one untimed forward, medians over --rounds. Each
forward's peak resident memory above its start is read from /proc/self/status (VmHWM, reset before the forward
through /proc/self/clear_refs; Linux only, else nan). The script says whether the two give the same logits, bit
for bit (they should: the kernel's explicit masks give the bits of the structure they hold).
"""

import argparse
import os
import re
import statistics
import time

import torch
import sdpa.transformers as sht
from transformers import AttentionInterface, AttentionMaskInterface, AutoModelForCausalLM
from transformers.masking_utils import sdpa_mask

from hf_llama import add_shape_args, check_positive, check_shape_args, llama_config, use_threads

BUILDERS = {"build_mask (PatternMask)": sht.build_mask, "sdpa_mask (booleans)": sdpa_mask}
NAME = "bench_masks"


def _status_mib(field):
    try:
        with open("/proc/self/status") as fh:
            return int(re.search(rf"^{field}:\s+(\d+) kB", fh.read(), re.M)[1]) / 1024
    except (OSError, TypeError):
        return float("nan")


def _reset_peak():
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")  # resets VmHWM to the current resident size
    except OSError:
        pass


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_shape_args(ap, window=True)
    ap.set_defaults(layers=2, window=1024)
    ap.add_argument("--prefill", type=int, default=16384)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=0, help="0: torch's default")
    a = ap.parse_args()
    check_shape_args(ap, a)
    check_positive(ap, a, "prefill", "rounds", "window")
    if not sht._PATTERNS:
        ap.error(f"transformers {sht._transformers.__version__}: its sdpa_mask takes other arguments than "
                 f"build_mask's, so the backend forms every mask (nothing to compare)")
    threads = use_threads(a.threads)

    AttentionInterface.register(NAME, sht.attention_forward)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(llama_config(a, a.prefill), attn_implementation=NAME).eval()
    ids = torch.randint(1, a.vocab, (1, a.prefill), generator=torch.Generator().manual_seed(1))

    def forward(builder):
        AttentionMaskInterface.register(NAME, BUILDERS[builder])
        _reset_peak()
        start_mib = _status_mib("VmRSS")
        start = time.perf_counter()
        with torch.no_grad():
            logits = model(ids, use_cache=False, logits_to_keep=1).logits
        return time.perf_counter() - start, _status_mib("VmHWM") - start_mib, logits

    names = list(BUILDERS)
    seconds, peak, logits = ({n: [] for n in names} for _ in range(3))
    print(f"untimed forward ({a.prefill} tokens)...", flush=True)
    forward(names[0])
    for r in range(a.rounds):
        for n in (names if r % 2 == 0 else names[::-1]):
            s, p, out = forward(n)
            seconds[n].append(s)
            peak[n].append(p)
            logits[n] = out
        print(f"  round {r + 1} of {a.rounds}: " + ", ".join(f"{n} {seconds[n][-1]:.2f} s" for n in names), flush=True)

    print(f"\nprefill {a.prefill} tokens, sliding window {a.window} on every layer; {a.layers} layers, width "
          f"{a.width}, {a.heads} heads / {a.kv_heads} kv heads; float32, {threads} threads; isa {sht._api.active_isa()}; median "
          f"of {a.rounds} alternating rounds\n")
    print("| mask builder | forward s | peak memory above the start, MiB |")
    print("|---|---|---|")
    for n in names:
        print(f"| {n} | {statistics.median(seconds[n]):.3f} | {statistics.median(peak[n]):.0f} |")
    ours, theirs = names
    ratios = [b / o for o, b in zip(seconds[ours], seconds[theirs])]
    print(f"\n{theirs} / {ours}: forward {statistics.median(seconds[theirs]) / statistics.median(seconds[ours]):.3f}x "
          f"(per round {min(ratios):.3f}-{max(ratios):.3f}x); the booleans' own size "
          f"{a.prefill * a.prefill / 2**20:.0f} MiB; same logits, bit for bit: "
          f"{torch.equal(logits[ours], logits[theirs])}")
    print(f"load average (1 min) {os.getloadavg()[0]:.2f} after the rounds (above the thread count: other work shared "
          f"the cores)")


if __name__ == "__main__":
    main()

"""sdpa inside a Hugging Face model: a Llama-shaped model with random weights, prefill then greedy decoding,
attn_implementation "exact_cpu" (sdpa) against transformers' "sdpa" (PyTorch's scaled_dot_product_attention),
in the same run.

    flock /tmp/sdpa-cpu.lock .venv/bin/python bench/hf_model.py [--layers 12 --width 768 --heads 12 --kv-heads 4
                                                                --prefill 1024 --new 128 --rounds 3
                                                                --dtype float32|bfloat16]

Per backend: the prefill's wall time (one forward over --prefill tokens) and the decoding's (generate() of --new
tokens, KV cache: the --new - 1 steps after generate()'s own prefill, timed from the first token to the last), each
with the time spent inside the attention function (summed over layers and calls; calls with one query row are the
decoding's). The two backends are timed alternately (A B B A ...) and each figure is the median over
--rounds; the spread of the per-round ratios and the load average around the timings are printed under the table,
the host-busy caveat. Both run on the same torch thread count as sdpa's OpenMP threads. The models hold the same weights;
the script says whether their greedy tokens agree.

--sdpa-cache picks the sdpa backend's KV cache: growing (default; sdpa.transformers.GrowingCache, each step's
tokens written in place) or dynamic (transformers' DynamicCache, which concatenates the whole cache per layer and
step); torch sdpa runs transformers' default, DynamicCache, as its users get it. --kv-cache int8|fp8_e4m3 gives
the sdpa backend sdpa.transformers.QuantizedCache instead (keys and values in 8 bits, read as codes by the
kernel). The table gives each backend's cache size after generate() (sdpa.transformers.cache_nbytes).

--decode-only skips the timed prefill (the prefill columns print nan; generate() still runs its own) and --no-warmup
the untimed first run of each backend: for long contexts, where one prefill takes minutes and a warm-up is lost in
the noise of a run that long.

--batch B > 1 runs a padded batch: sequence b holds prefill - b·prefill/(2B) tokens, left-padded to --prefill (as a
tokenizer pads for generation), so transformers passes both backends its 4-d boolean mask (causal ∧ key padding)
on every call, prefill and decoding, instead of None.
"""

import argparse
import copy
import json
import os
import statistics
import time

import torch
import sdpa.transformers as sht
from transformers import (AttentionInterface, AttentionMaskInterface, AutoModelForCausalLM, DynamicCache,
                          LogitsProcessorList)
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import sdpa_mask

from hf_llama import CACHE_KWARG, StepClock, add_shape_args, check_positive, check_shape_args, llama_config, use_threads

BACKENDS = {"sdpa (exact_cpu)": sht.attention_forward, "torch sdpa": sdpa_attention_forward}


class Timed:
    """An attention function that adds its wall time to .seconds["prefill"] or, for a call with one query row
    (query (B, H, 1, D)), .seconds["decode"]; registered under its own name."""

    def __init__(self, name, fn):
        self.name, self.fn, self.seconds = name, fn, {"prefill": 0.0, "decode": 0.0}
        AttentionInterface.register(name, self)
        AttentionMaskInterface.register(name, sdpa_mask)  # both backends take transformers' sdpa masks

    def __call__(self, module, query, *args, **kwargs):
        t = time.perf_counter()
        out = self.fn(module, query, *args, **kwargs)
        self.seconds["decode" if query.shape[2] == 1 else "prefill"] += time.perf_counter() - t
        return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_shape_args(ap)
    ap.add_argument("--prefill", type=int, default=1024)
    ap.add_argument("--new", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--batch", type=int, default=1, help="> 1: a left-padded batch of uneven lengths")
    ap.add_argument("--threads", type=int, default=0, help="0: torch's default")
    ap.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32",
                    help="the model's weights and activations (both backends)")
    ap.add_argument("--decode-only", action="store_true", help="skip the timed prefill (long contexts)")
    ap.add_argument("--no-warmup", action="store_true", help="skip each backend's untimed first run")
    ap.add_argument("--sdpa-cache", choices=("growing", "dynamic"), default="growing",
                    help="the sdpa backend's KV cache in generate(): sdpa.transformers.GrowingCache (tokens appended "
                         "in place) or transformers' DynamicCache (torch.cat per step); torch sdpa always runs "
                         "transformers' default, DynamicCache")
    ap.add_argument("--kv-cache", choices=("float", "int8", "fp8_e4m3"), default="float",
                    help="the sdpa backend's cache format: float (per --sdpa-cache) or 8-bit "
                         "(sdpa.transformers.QuantizedCache)")
    ap.add_argument("--json", help="also write the figures here")
    a = ap.parse_args()
    check_shape_args(ap, a)
    check_positive(ap, a, "prefill", "rounds", "batch")
    if a.new < 2:
        ap.error(f"--new: must be >= 2 (the decoding is timed over its new - 1 steps), got {a.new}")
    threads = use_threads(a.threads)

    cfg = llama_config(a, a.prefill + a.new)
    dtype = getattr(torch, a.dtype)
    torch.manual_seed(0)
    timed = {label: Timed(f"bench_{i}", fn) for i, (label, fn) in enumerate(BACKENDS.items())}
    models = {}
    for label, t in timed.items():
        m = AutoModelForCausalLM.from_config(copy.deepcopy(cfg), attn_implementation=t.name).to(dtype).eval()
        if models:
            m.load_state_dict(next(iter(models.values())).state_dict())
        models[label] = m
    ids = torch.randint(1, a.vocab, (a.batch, a.prefill), generator=torch.Generator().manual_seed(1))
    attention_mask = torch.ones_like(ids)
    for b in range(a.batch):  # left padding: sequence b's first b·prefill/(2B) positions are pad tokens (id 0)
        pad = b * a.prefill // (2 * a.batch)
        ids[b, :pad], attention_mask[b, :pad] = 0, 0
    figures = {label: {"prefill_s": [], "prefill_attn_s": [], "decode_s": [], "decode_attn_s": []}
               for label in models}
    tokens, cache_bytes = {}, {}

    def one(label):
        m, t, f = models[label], timed[label], figures[label]
        with torch.no_grad():
            t.seconds = {"prefill": 0.0, "decode": 0.0}
            if not a.decode_only:
                start = time.perf_counter()
                m(ids, attention_mask=attention_mask)
                f["prefill_s"].append(time.perf_counter() - start)
                f["prefill_attn_s"].append(t.seconds["prefill"])
            t.seconds["decode"], clock = 0.0, StepClock()
            if label != labels[0] or (a.kv_cache == "float" and a.sdpa_cache == "dynamic"):
                cache = DynamicCache(config=m.config)  # generate()'s default, made here to be measured
            elif a.kv_cache == "float":
                cache = sht.GrowingCache(config=m.config)
            else:
                cache = sht.QuantizedCache(config=m.config, format=a.kv_cache)
            out = m.generate(ids, attention_mask=attention_mask, max_new_tokens=a.new, min_new_tokens=a.new,
                             do_sample=False, pad_token_id=0, logits_processor=LogitsProcessorList([clock]),
                             **{CACHE_KWARG: cache})
            cache_bytes[label] = sht.cache_nbytes(cache)
        # generate() runs the prefill again (not counted here), then a.new - 1 decoding steps between the clock's
        # first and last note
        f["decode_s"].append(clock.times[-1] - clock.times[0])
        f["decode_attn_s"].append(t.seconds["decode"])
        tokens[label] = out[:, a.prefill:].flatten().tolist()

    labels = list(models)
    load_before = os.getloadavg()[0]
    if not a.no_warmup:
        one(labels[0])  # warm-up (allocator, OpenMP pool), not counted
        one(labels[1])
    for f in figures.values():
        for v in f.values():
            v.clear()
    for r in range(a.rounds):
        for label in (labels if r % 2 == 0 else labels[::-1]):
            one(label)

    med = {label: {k: statistics.median(v) if v else float("nan") for k, v in f.items()} for label, f in figures.items()}
    print(f"Llama-shaped, random weights: {a.layers} layers, width {a.width}, {a.heads} heads / {a.kv_heads} kv "
          f"heads (head dim {a.width // a.heads}), vocab {a.vocab}; prefill {a.prefill} tokens, then {a.new} "
          f"greedy tokens; sdpa's cache {a.kv_cache if a.kv_cache != 'float' else a.sdpa_cache}, torch's DynamicCache; batch {a.batch}{' (left-padded, uneven)' if a.batch > 1 else ''}, {a.dtype}, {threads} threads; isa {sht._api.active_isa()}; median of "
          f"{a.rounds} alternating rounds")
    print()
    print("| backend | prefill: total s | prefill: attention s | decode: total s | decode: attention s | "
          "decode ms/token | decode tokens/s | KV cache MiB |")
    print("|---|---|---|---|---|---|---|---|")
    for label, f in med.items():
        print(f"| {label} | {f['prefill_s']:.3f} | {f['prefill_attn_s']:.3f} | {f['decode_s']:.3f} | "
              f"{f['decode_attn_s']:.3f} | {1000 * f['decode_s'] / (a.new - 1):.2f} | "
              f"{a.batch * (a.new - 1) / f['decode_s']:.1f} | {cache_bytes[label] / 2**20:.1f} |")
    base, ours = med[labels[1]], med[labels[0]]
    print()
    print(f"torch sdpa / sdpa: prefill attention {base['prefill_attn_s'] / ours['prefill_attn_s']:.2f}x, "
          f"prefill total {base['prefill_s'] / ours['prefill_s']:.2f}x, "
          f"decode attention {base['decode_attn_s'] / ours['decode_attn_s']:.2f}x, "
          f"decode total {base['decode_s'] / ours['decode_s']:.2f}x")
    # Each round's two backends ran back to back: the spread of their per-round ratios, and the load around the
    # timings, say how much other work on a shared host moved the medians.
    def spread(key):
        ratios = [b / o for b, o in zip(figures[labels[1]][key], figures[labels[0]][key]) if o > 0]
        return f"{min(ratios):.2f}-{max(ratios):.2f}x" if ratios else "-"

    print(f"per round, torch sdpa / sdpa: prefill attention {spread('prefill_attn_s')}, decode attention "
          f"{spread('decode_attn_s')}; load average (1 min) {load_before:.2f} before the warm-up, "
          f"{os.getloadavg()[0]:.2f} after the rounds (above the thread count: other work shared the cores, and the "
          f"figures are not this machine's)")
    same = sum(x == y for x, y in zip(tokens[labels[0]], tokens[labels[1]]))
    print(f"greedy tokens: {same} of {a.new * a.batch} agree (first differing step, sequences back to back: "
          f"{next((i for i, (x, y) in enumerate(zip(tokens[labels[0]], tokens[labels[1]])) if x != y), None)})")
    if a.json:
        with open(a.json, "w") as fh:
            json.dump({"args": vars(a), "threads": threads, "median": med, "runs": figures,
                       "cache_bytes": cache_bytes}, fh, indent=1)


if __name__ == "__main__":
    main()

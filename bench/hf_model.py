"""sdpa inside a Hugging Face model: a Llama-shaped model with random weights, prefill then greedy decoding,
attn_implementation "exact_cpu" (sdpa) against transformers' "sdpa" (PyTorch's scaled_dot_product_attention),
in the same run.

    flock /tmp/sdpa-cpu.lock .venv/bin/python bench/hf_model.py [--layers 12 --width 768 --heads 12 --kv-heads 4
                                                                --prefill 1024 --new 128 --rounds 3
                                                                --dtype float32|bfloat16]

Per run (a backend with its KV cache): the prefill's wall time (one forward over --prefill tokens into a fresh
cache of the run's kind, so an 8-bit cache's prefill attends over its codes as generate()'s does) and the
decoding's (generate() of --new tokens, KV cache: the last --new - 1 steps, timed from the first token to the last),
each with the time spent inside the attention function (summed over layers and calls; the decoding's: the one-query
calls of those steps). The runs are timed alternately (A B B A ...) and each figure is the median over --rounds; the
spread of the per-round ratios and the load average around the timings are printed under the table, the host-busy
caveat. All run on the same torch thread count as sdpa's OpenMP threads. The models hold the same weights; the
script says whether their greedy tokens agree.

--sdpa-cache picks the sdpa backend's KV cache: growing (default; sdpa.transformers.GrowingCache, each step's
tokens written in place) or dynamic (transformers' DynamicCache, which concatenates the whole cache per layer and
step); torch sdpa runs transformers' default, DynamicCache, as its users get it. --kv-cache int8|fp8_e4m3 gives
the sdpa backend sdpa.transformers.QuantizedCache instead (keys and values in 8 bits, read as codes by the
kernel); several formats, comma-separated (--kv-cache float,int8), each a run of its own in the same alternation,
so the 8-bit cache is timed against the float one as against torch. The table gives each run's cache size after
generate() (sdpa.transformers.cache_nbytes).

--decode-only times the decoding alone: the prompt but its last token is prefilled once, untimed, by the sdpa
backend, and each run's generate() starts from a copy of that cache in its own cache type (filled by its update(),
so an 8-bit cache holds the codes of the same keys and values), its first step the prompt's last token; the
prefill columns print nan. Every run then decodes from the same keys and values, and a run at a long context costs
its decoding, not a prefill of minutes. --no-warmup skips each run's untimed first go.

--window W gives every layer a sliding window of W tokens (Mistral's config, the same model otherwise): each
backend gets its own mask builder, sdpa's passing the window to the kernel as an option (sdpa.transformers.build_mask)
where transformers forms it as booleans for PyTorch's SDPA.

--batch B > 1 runs a padded batch: sequence b holds prefill - b·prefill/(2B) tokens, left-padded to --prefill (as a
tokenizer pads for generation), so transformers passes torch's backend its 4-d boolean mask (causal ∧ key padding)
on every call, prefill and decoding, instead of None, and sdpa's the same mask as a pattern (build_mask: causal and
window as options, the padding as [B, 1, 1, Nk]).
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

# each backend with the mask builder its users get: sdpa's hands causal and sliding-window masks over as patterns
BACKENDS = {"sdpa": (sht.attention_forward, sht._MASK_BUILDER), "torch": (sdpa_attention_forward, sdpa_mask)}
FORMATS = ("float", "int8", "fp8_e4m3")


class Timed:
    """An attention function that adds its wall time to .prefill_s or, for a call with one query row (query
    (B, H, 1, D)), appends it to .decode_calls; registered under its own name."""

    def __init__(self, name, fn, mask_fn):
        self.name, self.fn = name, fn
        self.reset()
        AttentionInterface.register(name, self)
        AttentionMaskInterface.register(name, mask_fn)

    def reset(self):
        self.prefill_s, self.decode_calls = 0.0, []

    def __call__(self, module, query, *args, **kwargs):
        t = time.perf_counter()
        out = self.fn(module, query, *args, **kwargs)
        if query.shape[2] == 1:
            self.decode_calls.append(time.perf_counter() - t)
        else:
            self.prefill_s += time.perf_counter() - t
        return out


def cache_formats(text):
    """--kv-cache's value: one format or several, comma-separated, each once."""
    formats = text.split(",")
    bad = [f for f in formats if f not in FORMATS]
    if bad or len(set(formats)) != len(formats):
        raise argparse.ArgumentTypeError(f"expected formats from {', '.join(FORMATS)}, comma-separated, each once; "
                                         f"got '{text}'")
    return formats


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_shape_args(ap, window=True)
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
    ap.add_argument("--kv-cache", type=cache_formats, default=["float"], metavar="{float,int8,fp8_e4m3}[,...]",
                    help="the sdpa backend's cache format: float (per --sdpa-cache) or 8-bit "
                         "(sdpa.transformers.QuantizedCache); several, comma-separated: a run each, alternated")
    ap.add_argument("--json", help="also write the figures here")
    a = ap.parse_args()
    check_shape_args(ap, a)
    check_positive(ap, a, "prefill", "rounds", "batch")
    if a.new < 2:
        ap.error(f"--new: must be >= 2 (the decoding is timed over its new - 1 steps), got {a.new}")
    if a.decode_only and a.prefill < 2:
        ap.error(f"--prefill: must be >= 2 with --decode-only (all but the last token are prefilled), got {a.prefill}")
    threads = use_threads(a.threads)

    cfg = llama_config(a, a.prefill + a.new)
    dtype = getattr(torch, a.dtype)
    torch.manual_seed(0)
    timed = {backend: Timed(f"bench_{backend}", *fns) for backend, fns in BACKENDS.items()}
    models = {}
    for backend, t in timed.items():
        m = AutoModelForCausalLM.from_config(copy.deepcopy(cfg), attn_implementation=t.name).to(dtype).eval()
        if models:
            m.load_state_dict(next(iter(models.values())).state_dict())
        models[backend] = m
    ids = torch.randint(1, a.vocab, (a.batch, a.prefill), generator=torch.Generator().manual_seed(1))
    attention_mask = torch.ones_like(ids)
    for b in range(a.batch):  # left padding: sequence b's first b·prefill/(2B) positions are pad tokens (id 0)
        pad = b * a.prefill // (2 * a.batch)
        ids[b, :pad], attention_mask[b, :pad] = 0, 0

    # The runs, alternated: one per sdpa cache format, then torch sdpa with transformers' DynamicCache.
    float_name = "GrowingCache" if a.sdpa_cache == "growing" else "DynamicCache"
    runs = {f"sdpa, {float_name if fmt == 'float' else fmt + ' QuantizedCache'}": ("sdpa", fmt) for fmt in a.kv_cache}
    runs["torch sdpa, DynamicCache"] = ("torch", "float")
    labels = list(runs)
    figures = {label: {"prefill_s": [], "prefill_attn_s": [], "decode_s": [], "decode_attn_s": []} for label in runs}
    tokens, cache_bytes = {}, {}

    def new_cache(backend, fmt, config):
        if fmt != "float":
            return sht.QuantizedCache(config=config, format=fmt)
        if backend == "sdpa" and a.sdpa_cache == "growing":
            return sht.GrowingCache(config=config)
        return DynamicCache(config=config)  # generate()'s default, made here to be measured

    prefix = None  # --decode-only: each layer's keys and values of the prompt but its last token
    if a.decode_only:
        print(f"prefilling {a.prefill - 1} tokens once (sdpa backend, untimed)...", flush=True)
        start = time.perf_counter()
        shared = DynamicCache(config=models["sdpa"].config)
        positions = (attention_mask.cumsum(-1) - 1).masked_fill(attention_mask == 0, 0)  # as generate() numbers them
        with torch.no_grad():
            models["sdpa"](ids[:, :-1], attention_mask=attention_mask[:, :-1], position_ids=positions[:, :-1],
                           use_cache=True, logits_to_keep=1, **{CACHE_KWARG: shared})
        prefix = [(layer.keys, layer.values) for layer in shared.layers]
        print(f"  {time.perf_counter() - start:.1f} s", flush=True)

    def one(label):
        backend, fmt = runs[label]
        m, t, f = models[backend], timed[backend], figures[label]
        with torch.no_grad():
            t.reset()
            if not a.decode_only:
                prefill_cache = new_cache(backend, fmt, m.config)
                start = time.perf_counter()
                m(ids, attention_mask=attention_mask, **{CACHE_KWARG: prefill_cache})
                f["prefill_s"].append(time.perf_counter() - start)
                f["prefill_attn_s"].append(t.prefill_s)
            t.reset()
            clock, cache = StepClock(), new_cache(backend, fmt, m.config)
            for layer, (k, v) in enumerate(prefix or []):
                cache.update(k, v, layer)
            out = m.generate(ids, attention_mask=attention_mask, max_new_tokens=a.new, min_new_tokens=a.new,
                             do_sample=False, pad_token_id=0, logits_processor=LogitsProcessorList([clock]),
                             **{CACHE_KWARG: cache})
            cache_bytes[label] = sht.cache_nbytes(cache)
        # a.new - 1 decoding steps between the clock's first and last note (the first: after generate()'s prefill,
        # or after the prompt's last token's step where the cache was prefilled); their attention calls are the last
        f["decode_s"].append(clock.times[-1] - clock.times[0])
        f["decode_attn_s"].append(sum(t.decode_calls[-(a.new - 1) * a.layers:]))
        tokens[label] = out[:, a.prefill:].flatten().tolist()

    load_before = os.getloadavg()[0]
    if not a.no_warmup:
        for label in labels:  # warm-up (allocator, OpenMP pool), not counted
            one(label)
    for f in figures.values():
        for v in f.values():
            v.clear()
    for r in range(a.rounds):
        for label in (labels if r % 2 == 0 else labels[::-1]):
            one(label)

    med = {label: {k: statistics.median(v) if v else float("nan") for k, v in f.items()} for label, f in figures.items()}
    window = f", sliding window {a.window} on every layer" if a.window else ""
    print(f"Llama-shaped{window}, random weights: {a.layers} layers, width {a.width}, {a.heads} heads / "
          f"{a.kv_heads} kv heads (head dim {a.width // a.heads}), vocab {a.vocab}; prefill {a.prefill} tokens"
          f"{' (shared, untimed)' if a.decode_only else ''}, then {a.new} greedy tokens; batch {a.batch}"
          f"{' (left-padded, uneven)' if a.batch > 1 else ''}, {a.dtype}, {threads} threads; isa "
          f"{sht._api.active_isa()}; median of {a.rounds} alternating rounds")
    print()
    print("| run | prefill: total s | prefill: attention s | decode: total s | decode: attention s | "
          "decode ms/token | decode tokens/s | KV cache MiB |")
    print("|---|---|---|---|---|---|---|---|")
    for label, f in med.items():
        print(f"| {label} | {f['prefill_s']:.3f} | {f['prefill_attn_s']:.3f} | {f['decode_s']:.3f} | "
              f"{f['decode_attn_s']:.3f} | {1000 * f['decode_s'] / (a.new - 1):.2f} | "
              f"{a.batch * (a.new - 1) / f['decode_s']:.1f} | {cache_bytes[label] / 2**20:.1f} |")
    print()

    # Each round's runs went back to back: the spread of their per-round ratios, and the load around the timings,
    # say how much other work on a shared host moved the medians.
    def spread(base, ours, key):
        ratios = [b / o for b, o in zip(figures[base][key], figures[ours][key]) if o > 0]
        return f"{min(ratios):.2f}-{max(ratios):.2f}x" if ratios else "-"

    def agree(x, y):
        same = sum(p == q for p, q in zip(tokens[x], tokens[y]))
        first = next((i for i, (p, q) in enumerate(zip(tokens[x], tokens[y])) if p != q), None)
        return f"{same} of {a.new * a.batch} agree (first differing step, sequences back to back: {first})"

    torch_label, sdpa_labels = labels[-1], labels[:-1]
    base = med[torch_label]
    for label in sdpa_labels:
        ours = med[label]
        print(f"torch sdpa / {label}: prefill attention {base['prefill_attn_s'] / ours['prefill_attn_s']:.2f}x, "
              f"prefill total {base['prefill_s'] / ours['prefill_s']:.2f}x, "
              f"decode attention {base['decode_attn_s'] / ours['decode_attn_s']:.2f}x, "
              f"decode total {base['decode_s'] / ours['decode_s']:.2f}x; per round: prefill attention "
              f"{spread(torch_label, label, 'prefill_attn_s')}, decode attention "
              f"{spread(torch_label, label, 'decode_attn_s')}, decode total {spread(torch_label, label, 'decode_s')}")
        print(f"  greedy tokens against torch sdpa: {agree(label, torch_label)}")
    first = sdpa_labels[0]
    for label in sdpa_labels[1:]:  # each other cache against the first sdpa run's
        print(f"{first} / {label}: decode total {med[first]['decode_s'] / med[label]['decode_s']:.2f}x "
              f"(per round {spread(first, label, 'decode_s')}), decode attention "
              f"{med[first]['decode_attn_s'] / med[label]['decode_attn_s']:.2f}x; greedy tokens: {agree(label, first)}")
    print(f"load average (1 min) {load_before:.2f} before the warm-up, {os.getloadavg()[0]:.2f} after the rounds "
          f"(above the thread count: other work shared the cores, and the figures are not this machine's)")
    if a.json:
        with open(a.json, "w") as fh:
            json.dump({"args": vars(a), "threads": threads, "median": med, "runs": figures,
                       "cache_bytes": cache_bytes, "tokens": tokens}, fh, indent=1)


if __name__ == "__main__":
    main()

"""What a decoding step's attention call costs inside a Hugging Face model, layer by layer of the Python path,
in one process: the same Llama-shaped model as bench/hf_model.py (random weights), greedy decoding with the KV
cache, its attention function switched between rounds (A B C D, then reversed, ...):

  torch sdpa      transformers' "sdpa" backend (PyTorch's scaled_dot_product_attention)
  sdpa full       sdpa.transformers' full route: sdpa.attention with its per-call checks and options
  sdpa inference  sdpa.transformers as it runs in inference: the layer's options checked once and cached
  kernel alone    sdpa's extension called on the same tensors with those options and a ready output buffer:
                  the floor of any Python path (what the call costs in C++ and in the handover)

With --kv-cache int8|fp8_e4m3 the model decodes into sdpa.transformers.QuantizedCache, whose new tokens the
attention call quantizes into the cache; the variants are then that cache's routes:

  quantize_kv, then full   the layer's new tokens quantized by sdpa.quantize_kv (as a layer read otherwise does),
                           then sdpa.attention_with_kvcache per call
  sdpa full                attention_with_kvcache per call, appending the new tokens
  sdpa inference           sdpa.transformers as it runs in inference: options cached, the layer's views ready

    flock /tmp/sdpa-cpu.lock .venv/bin/python bench/decode_layers.py [--prefill 1024 --new 64 --rounds 4
                                                                     --dtype float32|bfloat16 --kv-cache int8]

Prints, per variant, the median over rounds of the per-call median (µs) of the decoding's attention calls and
the decoding's ms per token. docs/python.md, "Inside a model", holds a run.
"""

import argparse
import statistics
import time

import torch
import sdpa.transformers as sht
from sdpa import _core, _ext
from transformers import AttentionInterface, AttentionMaskInterface, AutoModelForCausalLM
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import sdpa_mask

from hf_llama import StepClock, add_shape_args, check_shape_args, llama_config, use_threads


def full_route(module, query, key, value, mask, **kw):
    saved = sht._inference, sht._quantized_inference
    sht._inference = sht._quantized_inference = lambda *a: None  # the inference routes decline: the full one runs
    try:
        return sht.attention_forward(module, query, key, value, mask, **kw)
    finally:
        sht._inference, sht._quantized_inference = saved


def quantized_first(module, query, key, value, mask, **kw):
    key._sdpa_quantized.flush()  # the new tokens quantized apart (sdpa.quantize_kv), before the call
    return full_route(module, query, key, value, mask, **kw)


def kernel_alone(module, query, key, value, mask, scaling=None, **kw):
    B, Hq, Nq, _ = query.shape
    out = torch.empty(B, Nq, Hq, value.shape[3], dtype=query.dtype)
    causal = "top-left" if mask is None and Nq > 1 else None
    opts = _core._scalar_options(scaling, causal, None, None)
    keep = None if mask is None else mask[:, :, :, :key.shape[2]].view(torch.uint8)
    t = time.perf_counter()
    _ext.forward(query, key, value, out.transpose(1, 2), None, **{**opts, "keep": keep})
    KernelAlone.seconds = time.perf_counter() - t
    return out, None


class KernelAlone:
    seconds = 0.0


VARIANTS = {"torch sdpa": sdpa_attention_forward, "sdpa full": full_route, "sdpa inference": sht.attention_forward,
            "kernel alone": kernel_alone}
QUANTIZED_VARIANTS = {"quantize_kv, then full": quantized_first, "sdpa full": full_route,
                      "sdpa inference": sht.attention_forward}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_shape_args(ap)
    ap.add_argument("--prefill", type=int, default=1024)
    ap.add_argument("--new", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32")
    ap.add_argument("--kv-cache", choices=("float", "int8", "fp8_e4m3"), default="float",
                    help="float: transformers' DynamicCache; 8-bit: sdpa.transformers.QuantizedCache")
    ap.add_argument("--threads", type=int, default=0, help="0: torch's default")
    a = ap.parse_args()
    if a.new < 2 or a.rounds < 1 or a.prefill < 1:
        ap.error("--new >= 2, --rounds >= 1, --prefill >= 1")
    check_shape_args(ap, a)
    use_threads(a.threads)
    current = {"fn": None}
    calls = []

    def timed(module, query, *args, **kwargs):
        t = time.perf_counter()
        r = current["fn"](module, query, *args, **kwargs)
        if query.shape[2] == 1:
            # kernel alone: the extension's call itself, not the output's allocation around it
            calls.append(KernelAlone.seconds if current["fn"] is kernel_alone else time.perf_counter() - t)
        return r

    AttentionInterface.register("decode_layers", timed)
    AttentionMaskInterface.register("decode_layers", sdpa_mask)
    cfg = llama_config(a, a.prefill + a.new)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(cfg, attn_implementation="decode_layers").to(getattr(torch, a.dtype))
    model.eval()
    ids = torch.randint(1, a.vocab, (1, a.prefill), generator=torch.Generator().manual_seed(1))
    variants = VARIANTS if a.kv_cache == "float" else QUANTIZED_VARIANTS
    per_call = {name: [] for name in variants}
    per_token = {name: [] for name in variants}

    def one(name):
        current["fn"] = variants[name]
        calls.clear()
        clock = StepClock()
        cache = {} if a.kv_cache == "float" else {
            sht._CACHE_KWARG: sht.QuantizedCache(config=model.config, format=a.kv_cache)}
        with torch.no_grad():
            model.generate(ids, max_new_tokens=a.new, min_new_tokens=a.new, do_sample=False, pad_token_id=0,
                           logits_processor=[clock], **cache)
        return statistics.median(calls), (clock.times[-1] - clock.times[0]) / (a.new - 1)

    names = list(variants)
    for name in names:  # warm-up
        one(name)
    for r in range(a.rounds):
        for name in (names if r % 2 == 0 else names[::-1]):
            call, token = one(name)
            per_call[name].append(call)
            per_token[name].append(token)
    print(f"Llama-shaped, {a.layers} layers, width {a.width}, {a.heads}/{a.kv_heads} heads, {a.dtype}, "
          f"{'DynamicCache' if a.kv_cache == 'float' else a.kv_cache + ' QuantizedCache'}, prefill "
          f"{a.prefill}, {a.new} new tokens, "
          f"{torch.get_num_threads()} threads, isa {sht._api.active_isa()}; medians of {a.rounds} alternating rounds")
    print()
    print("| variant | decode attention µs/call | decode ms/token |")
    print("|---|---|---|")
    for name in names:
        print(f"| {name} | {1e6 * statistics.median(per_call[name]):.1f} | "
              f"{1e3 * statistics.median(per_token[name]):.2f} |")


if __name__ == "__main__":
    main()

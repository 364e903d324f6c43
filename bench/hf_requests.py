"""Many requests at once against one at a time, inside a Hugging Face model: --requests prompts of mixed lengths
(log-spaced from --min-prompt to --max-prompt tokens, random ids), each answered with --new greedy tokens, by the
Llama-shaped model of bench/hf_model.py (random weights, shape flags as there).

    flock /tmp/sdpa-cpu.lock .venv/bin/python bench/hf_requests.py [--requests 32 --min-prompt 16
                                                                   --max-prompt 512 --new 32 --rounds 2 --cb]

The ways to serve them, timed alternately (A B C ..., then reversed), medians over --rounds:

  sdpa, one batch       attn_implementation "exact_cpu", every request in one generate() call: prompts left-padded
                        to the longest, transformers' 4-d boolean mask (causal and key padding) on every call,
                        sdpa.transformers.GrowingCache. Each attention call holds all the sequences, each reading
                        its own keys (the mask's rows narrow each sequence's key range; padding is never read).
  sdpa, one at a time   "exact_cpu", one generate() per request, unpadded, GrowingCache.
  torch sdpa, one batch transformers' "sdpa" (PyTorch's scaled_dot_product_attention), the same padded batch,
                        transformers' DynamicCache.
  transformers CB       (--cb) transformers' continuous batching, generate_batch(): its scheduler and paged cache,
                        under "sdpa" (the attention implementations it takes are "sdpa", "paged|eager" and flash
                        ones; it refuses a registered backend such as "exact_cpu", docs/python.md).

Per way: the wall time of all requests (prefill and decoding), requests·new / time, and, for generate(), the
decoding's share (timed from each call's first generated token to its last). The greedy tokens of each way are
compared with "sdpa, one at a time" (the same model on each request alone): how many agree.
"""

import argparse
import copy
import os
import statistics
import time

import torch
import sdpa.transformers as sht
from transformers import AutoModelForCausalLM, DynamicCache, GenerationConfig, LogitsProcessorList
from transformers.generation.configuration_utils import ContinuousBatchingConfig

from hf_llama import CACHE_KWARG, StepClock, add_shape_args, check_positive, check_shape_args, llama_config, use_threads


def prompt_lengths(n, lo, hi):
    """n lengths from lo to hi, evenly spaced in log (the mix of a serving queue: many short, some long)."""
    if n == 1:
        return [hi]
    return [round(lo * (hi / lo) ** (i / (n - 1))) for i in range(n)]


def generate(model, cache, ids, mask, new):
    """Greedy tokens [B, new] of one generate() call, and its decoding seconds (first token to last)."""
    clock = StepClock()
    out = model.generate(ids, attention_mask=mask, max_new_tokens=new, min_new_tokens=new, do_sample=False,
                         pad_token_id=0, logits_processor=LogitsProcessorList([clock]), **{CACHE_KWARG: cache})
    return out[:, ids.shape[1]:], clock.times[-1] - clock.times[0]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_shape_args(ap)
    ap.add_argument("--requests", type=int, default=32)
    ap.add_argument("--min-prompt", type=int, default=16)
    ap.add_argument("--max-prompt", type=int, default=512)
    ap.add_argument("--new", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--threads", type=int, default=0, help="0: torch's default")
    ap.add_argument("--cb", action="store_true", help="also time transformers' continuous batching (torch sdpa)")
    a = ap.parse_args()
    check_shape_args(ap, a)
    check_positive(ap, a, "requests", "min_prompt", "rounds")
    if a.max_prompt < a.min_prompt:
        ap.error(f"--max-prompt {a.max_prompt}: must be >= --min-prompt {a.min_prompt}")
    if a.new < 2:
        ap.error(f"--new: must be >= 2 (the decoding is timed over its new - 1 steps), got {a.new}")
    threads = use_threads(a.threads)

    cfg = llama_config(a, a.max_prompt + a.new)
    torch.manual_seed(0)
    ours = AutoModelForCausalLM.from_config(copy.deepcopy(cfg), attn_implementation=sht.NAME).eval()
    theirs = AutoModelForCausalLM.from_config(copy.deepcopy(cfg), attn_implementation="sdpa").eval()
    theirs.load_state_dict(ours.state_dict())
    lengths = prompt_lengths(a.requests, a.min_prompt, a.max_prompt)
    gen = torch.Generator().manual_seed(1)
    prompts = [torch.randint(1, a.vocab, (n,), generator=gen) for n in lengths]
    ids = torch.zeros(a.requests, a.max_prompt, dtype=torch.long)  # left-padded with id 0, as a tokenizer pads
    mask = torch.zeros_like(ids)
    for b, p in enumerate(prompts):
        ids[b, a.max_prompt - len(p):], mask[b, a.max_prompt - len(p):] = p, 1

    def batch(model, make_cache):
        def run():
            toks, dec = generate(model, make_cache(model), ids, mask, a.new)
            return [t.tolist() for t in toks], dec
        return run

    def one_at_a_time():
        toks, dec = [], 0.0
        for p in prompts:
            t, d = generate(ours, sht.GrowingCache(config=ours.config), p[None], torch.ones_like(p)[None], a.new)
            toks.append(t[0].tolist())
            dec += d
        return toks, dec

    page = 64

    def continuous():
        gc = GenerationConfig(max_new_tokens=a.new, min_new_tokens=a.new, do_sample=False, eos_token_id=None,
                              pad_token_id=0)
        # its cache sized to the requests (left to itself it takes a share of the machine's free memory, and
        # allocates and zeroes it on every call: seconds on a CPU)
        pages = sum((n + a.new + page - 1) // page for n in lengths)
        cb = ContinuousBatchingConfig(page_size=page, num_blocks=pages, max_batch_tokens=sum(lengths))
        outs = theirs.generate_batch([p.tolist() for p in prompts], generation_config=gc, continuous_batching_config=cb,
                                     warmup=False)
        by_prompt = {tuple(o.prompt_ids): o.generated_tokens for o in outs.values()}
        return [by_prompt[tuple(p.tolist())] for p in prompts], float("nan")

    ways = {"sdpa, one batch": batch(ours, lambda m: sht.GrowingCache(config=m.config)),
            "sdpa, one at a time": one_at_a_time,
            "torch sdpa, one batch": batch(theirs, lambda m: DynamicCache(config=m.config))}
    if a.cb:
        ways["transformers CB (torch sdpa)"] = continuous
    seconds = {w: [] for w in ways}
    decode = {w: [] for w in ways}
    tokens = {}
    load_before = os.getloadavg()[0]
    with torch.no_grad():
        for name, run in ways.items():  # warm-up (allocator, OpenMP pool, CB's first setup), not counted
            tokens[name] = run()[0]
        for r in range(a.rounds):
            for name in (list(ways) if r % 2 == 0 else list(ways)[::-1]):
                start = time.perf_counter()
                toks, dec = ways[name]()
                seconds[name].append(time.perf_counter() - start)
                decode[name].append(dec)
                tokens[name] = toks

    print(f"Llama-shaped, random weights: {a.layers} layers, width {a.width}, {a.heads} heads / {a.kv_heads} kv "
          f"heads, vocab {a.vocab}; {a.requests} requests, prompts of {lengths[0]} to {lengths[-1]} tokens "
          f"({sum(lengths)} in all, log-spaced), {a.new} greedy tokens each; float32, {threads} threads; isa "
          f"{sht._api.active_isa()}; medians of {a.rounds} alternating rounds")
    print()
    print("| way | all requests s | tokens/s | x one at a time | decoding s | greedy tokens as one at a time |")
    print("|---|---|---|---|---|---|")
    ref = "sdpa, one at a time"
    base = statistics.median(seconds[ref])
    total = a.requests * a.new
    for name in ways:
        s, d = statistics.median(seconds[name]), statistics.median(decode[name])
        agree = sum(x == y for t, u in zip(tokens[name], tokens[ref]) for x, y in zip(t, u))
        print(f"| {name} | {s:.2f} | {total / s:.1f} | {base / s:.2f}x | {d:.2f} | {agree} of {total} |")
    print()
    print(f"load average (1 min) {load_before:.2f} before the warm-up, {os.getloadavg()[0]:.2f} after the rounds "
          f"(above the thread count: other work shared the cores)")


if __name__ == "__main__":
    main()

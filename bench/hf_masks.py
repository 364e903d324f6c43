"""A sliding-window model's prefill with sdpa's mask builder against transformers' own: the same "exact_cpu"
attention, handed either sdpa.transformers.build_mask's PatternMask (the window said as kernel options, no booleans
formed) or transformers' masking_utils.sdpa_mask (the [B, 1, N, N] booleans formed, then read by the kernel).

    flock /tmp/sdpa-cpu.lock .venv/bin/python bench/hf_masks.py [--prefill 16384 --window 1024 --layers 2
                                                                 --rounds 3 --threads 2 --encoder --batch 4
                                                                 --torch --chunked --packed 16 --train]

The model is bench/hf_llama.py's with a sliding window on every layer (Mistral's config); one forward over
--prefill tokens without a cache, the logits of the last position only. With --encoder it is a ModernBERT of the
same width, heads and layers instead (no kv heads: every head its own), every layer local: each token sees the
--window tokens on either side (ModernBERT's local_attention = 2 × window; its MLP 1.5 × the width), the
last hidden state of one forward. With --chunked it is a Llama 4 text model of the same shape whose every layer is
chunked (Llama 4's chunked layers: a token sees the tokens before it in its own chunk of --window positions; RoPE
on every layer, no mixture of experts), which build_mask says as one kernel call a chunk. --batch B makes it a
padded batch (sequence b with b·N/(2B) pad positions), so the masks carry key padding. --packed K packs the prompt
from K sequences of (nearly) equal lengths, position_ids restarting at each (a padding-free collator's batch, which
transformers masks sequence by sequence and build_mask hands over as one varlen call). --train times a training
step instead (the loss over every position, forward and backward) and compares the losses. --torch adds
transformers' own sdpa backend to the rounds. The routes are timed alternately (A B, then B A, ...) on the same
model after one untimed forward, medians over --rounds. Each forward's peak resident memory above its start is
read from /proc/self/status (VmHWM, reset before the forward through /proc/self/clear_refs; Linux only, else nan).
The script says whether the two give the same outputs, bit for bit (they should: the kernel's explicit masks give
the bits of the structure they hold; chunks and packed sequences are the exception, their calls tiling each chunk's
or sequence's keys from its own start, so it says how far apart they are).
"""

import argparse
import os
import re
import statistics
import time

import torch
import sdpa.transformers as sht
from transformers import (AttentionInterface, AttentionMaskInterface, AutoModel, AutoModelForCausalLM,
                          Llama4TextConfig, ModernBertConfig)
from transformers.masking_utils import sdpa_mask

from hf_llama import add_shape_args, check_positive, check_shape_args, llama_config, use_threads

# route name -> (attention function, mask builder), registered together under NAME before each forward
ROUTES = {"build_mask (PatternMask)": (sht.attention_forward, sht.build_mask),
          "sdpa_mask (booleans)": (sht.attention_forward, sdpa_mask)}
TORCH_ROUTE = "torch sdpa (booleans)"  # with --torch: transformers' own "sdpa" backend, PyTorch's kernel
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
    ap.add_argument("--batch", type=int, default=1,
                    help="sequences in the forward; above 1 a padded batch: sequence b has b·prefill/(2·batch) pad "
                         "positions (left for the decoder, right for the encoder), so the masks carry key padding")
    ap.add_argument("--threads", type=int, default=0, help="0: torch's default")
    ap.add_argument("--encoder", action="store_true",
                    help="a ModernBERT encoder whose every layer sees --window tokens on either side (bidirectional "
                         "masks), instead of the causal decoder")
    ap.add_argument("--torch", action="store_true",
                    help="also time transformers' own sdpa backend (PyTorch's SDPA over sdpa_mask's booleans) in the "
                         "same rounds, and compare its output with sdpa's")
    ap.add_argument("--chunked", action="store_true",
                    help="a Llama 4 text model whose every layer is chunked (chunks of --window positions) instead of "
                         "the sliding-window decoder")
    ap.add_argument("--packed", type=int, default=0,
                    help="pack the prompt from this many sequences of (nearly) equal lengths (decoder only)")
    ap.add_argument("--train", action="store_true",
                    help="time a training step (forward and backward of the loss over every position)")
    a = ap.parse_args()
    if a.packed and (a.encoder or a.chunked or a.batch > 1):
        ap.error("--packed: the sliding-window decoder alone, one row (no --encoder, --chunked or --batch)")
    if a.packed < 0 or a.packed > a.prefill:
        ap.error(f"--packed: must be from 1 to --prefill ({a.prefill}) sequences, got {a.packed}")
    if a.chunked and a.encoder:
        ap.error("--chunked and --encoder: one model at a time")
    if a.chunked and a.batch > 1:
        ap.error("--chunked with --batch above 1: left padding starts each sequence's chunks at its own first token, "
                 "which transformers' mask says per sequence, so both routes would form the booleans")
    check_shape_args(ap, a)
    check_positive(ap, a, "prefill", "rounds", "window", "batch")
    if not sht._PATTERNS:
        ap.error(f"transformers {sht._transformers.__version__}: its sdpa_mask takes other arguments than "
                 f"build_mask's, so the backend forms every mask (nothing to compare)")
    threads = use_threads(a.threads)

    routes = dict(ROUTES)
    if a.torch:
        from transformers.integrations.sdpa_attention import sdpa_attention_forward
        routes[TORCH_ROUTE] = (sdpa_attention_forward, sdpa_mask)
    AttentionInterface.register(NAME, sht.attention_forward)
    torch.manual_seed(0)
    if a.encoder:
        config = ModernBertConfig(vocab_size=a.vocab, hidden_size=a.width, intermediate_size=3 * a.width // 2,
                                  num_hidden_layers=a.layers, num_attention_heads=a.heads,
                                  local_attention=2 * a.window, layer_types=["sliding_attention"] * a.layers,
                                  max_position_embeddings=a.prefill, pad_token_id=0, bos_token_id=None,
                                  eos_token_id=None, cls_token_id=None, sep_token_id=None)
        model = AutoModel.from_config(config, attn_implementation=NAME).eval()
    elif a.chunked:
        shape = llama_config(a, a.prefill).to_dict()
        config = Llama4TextConfig(**{k: shape[k] for k in (
            "vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
            "max_position_embeddings", "eos_token_id", "bos_token_id")},
            intermediate_size_mlp=shape["intermediate_size"], attention_chunk_size=a.window,
            no_rope_layers=[1] * a.layers, layer_types=["chunked_attention"] * a.layers,
            interleave_moe_layer_step=a.layers + 1, pad_token_id=None)
        model = AutoModelForCausalLM.from_config(config, attn_implementation=NAME).eval()
    else:
        model = AutoModelForCausalLM.from_config(llama_config(a, a.prefill), attn_implementation=NAME).eval()
    ids = torch.randint(1, a.vocab, (a.batch, a.prefill), generator=torch.Generator().manual_seed(1))
    # a padded batch: sequence b has b·N/(2B) pad positions, on the left for the decoder (positions count real
    # tokens, as generate() sets them), on the right for the encoder; batch 1 has none
    attention_mask = torch.ones_like(ids)
    for b in range(a.batch):
        pad = b * a.prefill // (2 * a.batch)
        if pad:
            (attention_mask[b, a.prefill - pad:] if a.encoder else attention_mask[b, :pad]).zero_()
    inputs = dict(attention_mask=attention_mask) if a.batch > 1 else {}
    if a.batch > 1 and not a.encoder:
        inputs["position_ids"] = (attention_mask.cumsum(-1) - 1).clamp(min=0)
    if a.packed:  # K sequences back to back, positions restarting at each: what transformers reads as packed
        bounds = [a.prefill * i // a.packed for i in range(a.packed + 1)]
        inputs["position_ids"] = torch.cat([torch.arange(e - s) for s, e in zip(bounds, bounds[1:])])[None]

    def forward(route):
        attention, builder = routes[route]
        AttentionInterface.register(NAME, attention)
        AttentionMaskInterface.register(NAME, builder)
        _reset_peak()
        start_mib = _status_mib("VmRSS")
        start = time.perf_counter()
        if a.train:
            model.zero_grad(set_to_none=True)
            loss = (model(ids, **inputs).last_hidden_state.square().mean() if a.encoder
                    else model(ids, use_cache=False, labels=ids, **inputs).loss)
            loss.backward()
            out = loss.detach()
        else:
            with torch.no_grad():
                if a.encoder:
                    out = model(ids, **inputs).last_hidden_state
                else:
                    out = model(ids, use_cache=False, logits_to_keep=1, **inputs).logits
        return time.perf_counter() - start, _status_mib("VmHWM") - start_mib, out

    names = list(routes)
    seconds, peak, outputs = ({n: [] for n in names} for _ in range(3))
    print(f"untimed forward ({a.prefill} tokens)...", flush=True)
    forward(names[0])
    for r in range(a.rounds):
        for n in (names if r % 2 == 0 else names[::-1]):
            s, p, out = forward(n)
            seconds[n].append(s)
            peak[n].append(p)
            outputs[n] = out
        print(f"  round {r + 1} of {a.rounds}: " + ", ".join(f"{n} {seconds[n][-1]:.2f} s" for n in names), flush=True)

    if a.encoder:
        shape = (f"a ModernBERT encoder, {a.window} tokens on either side on every layer; {a.layers} layers, width "
                 f"{a.width}, {a.heads} heads")
    else:
        pattern = f"chunks of {a.window} (Llama 4)" if a.chunked else f"sliding window {a.window}"
        shape = (f"{pattern} on every layer; {a.layers} layers, width {a.width}, {a.heads} heads / "
                 f"{a.kv_heads} kv heads")
    padded = f", a padded batch of {a.batch}" if a.batch > 1 else ""
    padded += f", packed from {a.packed} sequences" if a.packed else ""
    padded += ", a training step (forward and backward)" if a.train else ""
    print(f"\nprefill {a.prefill} tokens{padded}, {shape}; float32, {threads} threads; isa {sht._api.active_isa()}; "
          f"median of {a.rounds} alternating rounds\n")
    timed = "training step" if a.train else "forward"
    print(f"| attention, mask | {timed} s | peak memory above the start, MiB |")
    print("|---|---|---|")
    for n in names:
        print(f"| {n} | {statistics.median(seconds[n]):.3f} | {statistics.median(peak[n]):.0f} |")
    what = "loss" if a.train else "hidden states" if a.encoder else "logits"
    ours, theirs = names[:2]

    def ratio(other):
        ratios = [b / o for o, b in zip(seconds[ours], seconds[other])]
        median = statistics.median(seconds[other]) / statistics.median(seconds[ours])
        return f"{other} / {ours}: {timed} {median:.3f}x (per round {min(ratios):.3f}-{max(ratios):.3f}x)"
    formed = (a.batch if a.batch > 1 else 1) * a.prefill * a.prefill  # padding makes them one per sequence

    def gap(other):
        return (outputs[other] - outputs[ours]).abs().max().item() / outputs[ours].abs().max().item()
    same = (f"largest {what} difference over the largest {what}: {gap(theirs):.2e}" if a.chunked or a.packed
            else f"same {what}, bit for bit: {torch.equal(outputs[ours], outputs[theirs])}")
    print(f"\n{ratio(theirs)}; the booleans' own size {formed / 2**20:.0f} MiB; {same}")
    if a.torch:
        print(f"{ratio(TORCH_ROUTE)}; largest {what} difference over the largest {what}: {gap(TORCH_ROUTE):.2e} "
              f"(two exact kernels' float32 rounding)")
    print(f"load average (1 min) {os.getloadavg()[0]:.2f} after the rounds (above the thread count: other work shared "
          f"the cores)")


if __name__ == "__main__":
    main()

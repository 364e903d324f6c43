"""What the in-model benchmarks share (bench/hf_model.py, decode_layers.py, hf_requests.py, hf_masks.py): the
Llama-shaped decoder with random weights they time (with a sliding window on every layer where asked), its shape
flags, generate()'s keyword for a cache object, the per-token clock and the flag checks."""

import time

import torch
from transformers import LlamaConfig, LogitsProcessor, MistralConfig

import sdpa.transformers as sht

from bench_args import check_positive  # the four scripts import it from here, beside the shape flags

CACHE_KWARG = sht._CACHE_KWARG  # generate()'s and a model's keyword for a cache object


def add_shape_args(ap, window=False):
    """The model's shape flags, with the defaults every in-model table in docs/python.md uses; window: also
    --window (for the benchmarks whose every route takes a sliding window)."""
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--width", type=int, default=768)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--kv-heads", type=int, default=4)
    ap.add_argument("--vocab", type=int, default=32000)
    if window:
        ap.add_argument("--window", type=int, default=0,
                        help="a sliding window of this many tokens on every layer (Mistral's config: Llama's model "
                             "with transformers' sliding-window masks); 0: none")


def check_shape_args(ap, a):
    """Refuses a shape the model cannot take, naming the flag (ap.error exits)."""
    check_positive(ap, a, "layers", "width", "heads", "kv_heads", "vocab")
    if getattr(a, "window", 0) < 0:
        ap.error(f"--window: must be >= 0 (0: no window), got {a.window}")
    if a.width % a.heads or a.heads % a.kv_heads:
        ap.error(f"--width {a.width}, --heads {a.heads}, --kv-heads {a.kv_heads}: heads must divide width and "
                 f"kv-heads must divide heads")


def use_threads(n):
    """torch's thread count set to n (0: torch's default, which sdpa's OpenMP matches); returns the count."""
    if n:
        torch.set_num_threads(n)
    return torch.get_num_threads()


class StepClock(LogitsProcessor):
    """Notes the time at each generated token: the first right after generate()'s prefill, each later one after a
    decoding step, so the decoding's wall time is measured, not a difference of two prefill-sized times."""

    def __init__(self):
        self.times = []

    def __call__(self, input_ids, scores):
        self.times.append(time.perf_counter())
        return scores


def llama_config(a, positions):
    """The LlamaConfig of the shape flags (a MistralConfig with --window: the same model, each layer's keys
    limited to the window), room for `positions` tokens, no special tokens (greedy decoding runs its full length).
    The MLP's width is 8/3 of the model's, rounded down to a multiple of 64 (Llama's rule)."""
    shape = dict(vocab_size=a.vocab, hidden_size=a.width, intermediate_size=8 * a.width // 3 // 64 * 64,
                 num_hidden_layers=a.layers, num_attention_heads=a.heads, num_key_value_heads=a.kv_heads,
                 max_position_embeddings=positions, eos_token_id=None, bos_token_id=None)
    if getattr(a, "window", 0):
        return MistralConfig(**shape, sliding_window=a.window)
    return LlamaConfig(**shape)

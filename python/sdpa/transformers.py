"""sdpa as a Hugging Face transformers attention backend.

    import sdpa.transformers
    model = AutoModelForCausalLM.from_config(cfg, attn_implementation=sdpa.transformers.NAME)

Importing this module registers `attention_forward` with transformers' AttentionInterface
and `build_mask` (transformers' own boolean mask builder, `masking_utils.sdpa_mask`, but for
the causal and sliding-window patterns it hands over as `PatternMask`) with
AttentionMaskInterface, both under NAME = "exact_cpu". The name holds no "sdpa" on
purpose: transformers takes any such name for PyTorch's SDPA and refuses it for models
PyTorch's SDPA cannot serve (Gemma2's soft-capping among them).

What reaches sdpa: grouped-query attention with K and V at their own head count (no
repeat), the model's scaling (1/sqrt(d) when absent), soft-capping, and the mask. The mask
contract is the one transformers keeps for its `sdpa` backend: a boolean [B, 1, Nq, Nk]
mask (True takes part; padding, sliding windows and the KV cache's bottom-right causal
alignment all folded in by transformers), or None where the mask would be plain causal —
then causal is top-left for Nq > 1 (a prefill from an empty cache, where top-left is
bottom-right) and absent for one query (decoding sees every cached key). Where
transformers would form a causal or sliding-window mask (a sliding layer past its window,
a chunk over a cache, a padded batch; Llama 4's chunked layers; a packed batch), `build_mask`
returns a PatternMask instead, which the backend reads as the kernel's causal and window
options and a [B, 1, 1, Nk] key-padding mask (with chunks, one call for each chunk the
queries touch; packed, one varlen call over the batch's sequences): the [B, 1, Nq, Nk]
booleans (1 GiB a sequence at 32k tokens) are never formed. A
float mask passed by the caller is added to the scores, as in eager.
"""

from __future__ import annotations

import inspect
import re
from typing import Optional

from . import torch as _st  # registers the custom ops; says how to install torch if missing
from . import _api, _core

_torch = _st._torch

NAME = "exact_cpu"
MIN_TRANSFORMERS = "4.53.0"  # AttentionMaskInterface and masking_utils.sdpa_mask first appear in 4.53

try:
    import transformers as _transformers
except ImportError as _e:  # pragma: no cover - exercised only without transformers
    raise ImportError(f"sdpa.transformers needs Hugging Face transformers >= {MIN_TRANSFORMERS}, which is not "
                      f"importable here: pip install 'transformers>={MIN_TRANSFORMERS}'") from _e


def _version_tuple(v: str):
    parts = []
    for p in v.split(".")[:3]:
        digits = "".join(ch for ch in p if ch.isdigit()) if not p.isdigit() else p
        parts.append(int(digits) if digits else 0)
    return tuple(parts)


def _check_version(found: str) -> None:
    if _version_tuple(found) < _version_tuple(MIN_TRANSFORMERS):
        raise ImportError(f"sdpa.transformers needs transformers >= {MIN_TRANSFORMERS} (its AttentionInterface and "
                          f"AttentionMaskInterface), found {found}: pip install -U 'transformers>={MIN_TRANSFORMERS}'")


_check_version(_transformers.__version__)

# generate()'s and a model's keyword for a cache object, for this package's benchmarks and tests: "cache" from
# transformers 5.24 (the first release seen to take it; past_key_values is deprecated there), past_key_values before
_CACHE_KWARG = "cache" if _version_tuple(_transformers.__version__) >= (5, 24, 0) else "past_key_values"

from transformers import AttentionInterface, AttentionMaskInterface, DynamicCache  # noqa: E402
from transformers.cache_utils import DynamicLayer  # noqa: E402
from transformers.masking_utils import (and_masks as _and_masks, causal_mask_function as _causal,  # noqa: E402
                                        sdpa_mask as _sdpa_mask, sliding_window_overlay as _sliding_overlay)
import transformers.masking_utils as _masking  # noqa: E402
from torch.utils._pytree import tree_map as _tree_map  # noqa: E402


def _skip_test(name, arguments):
    """transformers' own test, by name, for "sdpa_mask returns None here" (a plain causal or bidirectional mask,
    which PyTorch's SDPA says by is_causal or nothing): build_mask returns None where it holds, as sdpa_mask
    does. None where the release lacks it or names other arguments (not called blind: a PatternMask stands
    there, which the backend reads the same way)."""
    test = getattr(_masking, name, None)
    if test is None or tuple(inspect.signature(test).parameters) != arguments:
        return None  # pragma: no cover - another release
    return test


_ignore_causal_mask_sdpa = _skip_test("_ignore_causal_mask_sdpa", (
    "padding_mask", "q_length", "kv_length", "q_offset", "kv_offset", "local_attention_size"))
_ignore_bidirectional_mask_sdpa = _skip_test("_ignore_bidirectional_mask_sdpa", (
    "padding_mask", "kv_length", "local_attention_size"))


def _seen(q, kv, causal: bool, window: Optional[int], chunk: Optional[int] = None):
    """Whether position kv is seen from position q (broadcast tensors) in one of the patterns PatternMask holds:
    transformers' causal_mask_function (kv <= q) with sliding_window_overlay (kv > q - window) or chunked_overlay
    without left padding (kv // chunk == q // chunk: Llama 4's chunked layers), or its bidirectional_mask_function
    (every key) with sliding_window_bidirectional_overlay (|q - kv| <= window)."""
    seen = kv <= q if causal else _torch.ones(_torch.broadcast_shapes(q.shape, kv.shape), dtype=_torch.bool)
    if window is not None:
        seen &= kv > q - window if causal else (q - kv).abs() <= window
    if chunk is not None:
        seen &= kv // chunk == q // chunk
    return seen


class PatternMask(_torch.Tensor):
    """transformers' boolean mask [B, 1, Nq, Nk] of a causal or bidirectional pattern, with or without a sliding
    window or chunks and key padding, held as the pattern: query row i (position q_offset + i) of sequence b sees
    key j (position kv_offset + j) as _seen says (causal: kv_offset + j <= q_offset + i, and with a window W also
    kv_offset + j > q_offset + i - W, with chunks of C also the same chunk of C positions; bidirectional: every
    key, and with a window W those within W positions on either side), and with padding [B, Nk] (bool) also where
    padding[b, j]; in a packed batch also where packed[b, i] == packed[b, j] (its [B, N] sequence index).
    attention_forward reads it as the kernel's causal and window options and a [B, 1, 1, Nk] keep mask, one call
    for each chunk the queries touch over that chunk's keys (pieces), or packed as one varlen call (offsets), so
    the booleans are never formed; anything else that touches it (a model slicing it, another backend, printing)
    gets the boolean tensor, formed on first use and kept (dense())."""

    __torch_function__ = _torch._C._disabled_torch_function_impl  # ops reach __torch_dispatch__ as plain ones

    @staticmethod
    def __new__(cls, batch: int, q_length: int, kv_length: int, q_offset: int, kv_offset: int,
                window: Optional[int], padding: Optional["_torch.Tensor"] = None, device="cpu", causal: bool = True,
                chunk: Optional[int] = None, packed: Optional["_torch.Tensor"] = None):
        self = _torch.Tensor._make_wrapper_subclass(cls, (batch, 1, q_length, kv_length), dtype=_torch.bool,
                                                    device=device)
        self.q_offset, self.kv_offset, self.window, self.padding = q_offset, kv_offset, window, padding
        self.causal, self.chunk, self.packed = causal, chunk, packed
        self._dense = self._offsets = None
        return self

    def rows(self, rows: "_torch.Tensor") -> "_torch.Tensor":
        """The booleans of the query rows `rows` (indices, [r]) over every key, before the key padding: [r, Nk],
        or [B, r, Nk] for a packed batch."""
        q = (rows + self.q_offset)[:, None]
        keys = _torch.arange(self.shape[3], device=self.device)
        seen = _seen(q, (keys + self.kv_offset)[None, :], self.causal, self.window, self.chunk)
        if self.packed is not None:
            seen = seen & (self.packed[:, rows, None] == self.packed[:, None, keys])
        return seen

    def dense(self) -> "_torch.Tensor":
        """The boolean tensor, as sdpa_mask forms it (stride 0 over the batch unless packed)."""
        if self._dense is None:
            batch, _, q_length, kv_length = self.shape
            seen = self.rows(_torch.arange(q_length, device=self.device))
            seen = seen[:, None] if seen.ndim == 3 else seen.expand(batch, 1, q_length, kv_length)
            self._dense = seen if self.padding is None else seen & self.padding[:, None, None, :]
        return self._dense

    def offsets(self) -> "_torch.Tensor":
        """A packed batch's sequences as varlen offsets (int32, from 0 to B·N) over its B·N tokens, row after row:
        a sequence starts at each row's start and wherever its sequence index changes. Found once and kept: every
        layer of the model reads the same mask."""
        if self._offsets is None:
            starts = _torch.ones(self.packed.shape, dtype=_torch.bool, device=self.device)
            starts[:, 1:] = self.packed[:, 1:] != self.packed[:, :-1]
            first = _torch.nonzero(starts.reshape(-1)).reshape(-1)
            self._offsets = _torch.cat([first, first.new_tensor([starts.numel()])]).to(_torch.int32)
        return self._offsets

    def kernel_options(self, nq: int, nk: int):
        """(causal, window, keep) for a call of nq queries over the first nk keys, keep the key padding
        [B, 1, 1, nk] or None; or None where the kernel's alignments cannot say the pattern (its diagonal is
        neither top-left nor bottom-right for a causal one, not bottom-right for a bidirectional window, which the
        kernel centres there; chunks, which are pieces: dense() then)."""
        if nq != self.shape[2] or nk > self.shape[3] or self.chunk is not None or self.packed is not None:
            return None
        diagonal = self.q_offset - self.kv_offset  # row i's own position is key i + diagonal
        keep = None if self.padding is None else self.padding[:, None, None, :nk]
        if not self.causal:
            if self.window is not None and diagonal != nk - nq:
                return None
            return None, None if self.window is None else (self.window, self.window), keep
        causal = "bottom-right" if diagonal == nk - nq else "top-left" if diagonal == 0 else None
        if causal is None:
            return None
        return causal, None if self.window is None else (self.window - 1, 0), keep

    def pieces(self, nq: int, nk: int):
        """[(rows, keys, causal, window, keep)]: the kernel calls that give the pattern for nq queries over the first
        nk keys, each of the query rows `rows` (a slice) over the keys `keys` with those options: one call over
        every row and key (kernel_options), or with chunks one call for each chunk the queries touch, its rows over
        that chunk's keys up to its last row's position, bottom-right causal. None where no such calls say it
        (kernel_options' cases; a chunk's row before the first key present or past the last; a packed batch,
        which is one varlen call: attention_forward's _packed): dense() then."""
        if self.packed is not None:
            return None
        if self.chunk is None:
            options = self.kernel_options(nq, nk)
            return None if options is None else [(slice(None), slice(None), *options)]
        if nq != self.shape[2] or nk > self.shape[3] or not self.causal or self.window is not None:
            return None
        chunk, first, last = self.chunk, self.q_offset, self.q_offset + nq - 1  # positions of the rows
        if last >= self.kv_offset + nk:
            return None
        calls = []
        for start in range(first // chunk * chunk, last + 1, chunk):  # each chunk's first position
            row0, row1 = max(first, start), min(last, start + chunk - 1)
            key0 = max(self.kv_offset, start)
            if row0 < key0:
                return None
            keys = slice(key0 - self.kv_offset, row1 + 1 - self.kv_offset)
            keep = None if self.padding is None else self.padding[:, None, None, keys]
            calls.append((slice(row0 - first, row1 + 1 - first), keys, "bottom-right", None, keep))
        return calls

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        def formed(x):
            return x.dense() if isinstance(x, PatternMask) else x
        return func(*_tree_map(formed, args), **_tree_map(formed, kwargs or {}))

    def __repr__(self):
        return (f"PatternMask(shape={tuple(self.shape)}, causal={self.causal}, q_offset={self.q_offset}, "
                f"kv_offset={self.kv_offset}, window={self.window}, chunk={self.chunk}, "
                f"packed={'None' if self.packed is None else 'a [B, N] sequence index'}, "
                f"padding={'None' if self.padding is None else 'a [B, Nk] mask'})")


def _closure(fn) -> dict:
    return dict(zip(fn.__code__.co_freevars, (cell.cell_contents for cell in fn.__closure__ or ())))


_AND_CODE = _and_masks(_causal).__code__
_bidirectional_overlay = getattr(_masking, "sliding_window_bidirectional_overlay", None)  # (absent: None)
# (base mask function, whether it is causal, the code of the window overlay that may be and-ed on top of it)
_BASES = ((_causal, True, _sliding_overlay(1).__code__),
          (getattr(_masking, "bidirectional_mask_function", None), False,
           None if _bidirectional_overlay is None else _bidirectional_overlay(1).__code__))


def _inner_code(name: str, *arguments):
    """The code object of the function transformers' masking_utils.NAME(*arguments) returns (None where this release
    lacks NAME): how a mask function built by it is told apart."""
    make = getattr(_masking, name, None)
    return None if make is None else make(*arguments).__code__


_CHUNKED_CODE = _inner_code("chunked_overlay", 1, None)
_REMAP_CODE = _inner_code("remap_positions_for_packed_sequence", None, None)
_PACKED_CODE = _inner_code("packed_sequence_mask_function", None)


def _size(value) -> Optional[int]:
    """A window's or a chunk's size read from an overlay's closure: a positive int, else None."""
    return value if type(value) is int and value >= 1 else None


def _pattern(mask_function):
    """PatternMask's causal, window, chunk and packed (a dict) for transformers' causal or bidirectional mask
    function, window, chunk and packed None; either and-ed with its sliding-window overlay
    (and_masks(sliding_window_overlay(W), causal_mask_function), as sliding_window_causal_mask_function builds it;
    and_masks(sliding_window_bidirectional_overlay(W), bidirectional_mask_function)), window W; the causal one
    and-ed with chunked_overlay(C, left_padding) whose left padding is all zeros (chunked_causal_mask_function,
    Llama 4's chunked layers), chunk C; a causal one, with or without its window, over a packed batch
    (and_masks(remap_positions_for_packed_sequence(f, position_ids), packed_sequence_mask_function(index)), as
    transformers builds it where position_ids restart without a cache), packed the [B, N] sequence index; None
    for anything else (a left-padded batch's chunks start at each sequence's own first token: formed)."""
    for base, causal, overlay in _BASES:
        if base is not None and mask_function is base:
            return dict(causal=causal, window=None, chunk=None, packed=None)
    if getattr(mask_function, "__code__", None) is not _AND_CODE:
        return None
    parts = _closure(mask_function).get("mask_functions", ())
    if len(parts) != 2:
        return None
    overlay_code = getattr(parts[0], "__code__", None)
    for base, causal, overlay in _BASES:
        if base is not None and parts[1] is base and overlay is not None and overlay_code is overlay:
            window = _size(_closure(parts[0]).get("sliding_window"))
            return None if window is None else dict(causal=causal, window=window, chunk=None, packed=None)
    if parts[1] is _causal and overlay_code is not None and overlay_code is _CHUNKED_CODE:
        closure = _closure(parts[0])
        chunk, left_padding = _size(closure.get("chunk_size")), closure.get("left_padding")
        if chunk is not None and isinstance(left_padding, _torch.Tensor) and not bool(left_padding.any()):
            return dict(causal=True, window=None, chunk=chunk, packed=None)
    if (overlay_code is not None and overlay_code is _REMAP_CODE
            and getattr(parts[1], "__code__", None) is _PACKED_CODE):
        inner = _pattern(_closure(parts[0]).get("mask_function"))
        index = _closure(parts[1]).get("packed_sequence_mask")
        if (inner is not None and inner["causal"] and inner["chunk"] is None and inner["packed"] is None
                and isinstance(index, _torch.Tensor) and index.ndim == 2):
            return {**inner, "packed": index}
    return None


def _is_pattern(mask_function, pattern: PatternMask) -> bool:
    """Whether mask_function gives the pattern on a few rows (the first and last query's, with a window those
    whose window edge falls inside the keys, with chunks the two about the first chunk edge among the keys, packed
    the first two of each of the first sequences of every row): a check of what _pattern read from its closures
    against what it computes, in case a transformers release changes a function's meaning."""
    q_length, kv_length = pattern.shape[2:]
    q_offset, kv_offset, window, chunk = pattern.q_offset, pattern.kv_offset, pattern.window, pattern.chunk
    rows = [q_offset, q_offset + q_length - 1]
    if window:
        rows += [kv_offset + window - 1, kv_offset + window] if pattern.causal else [kv_offset, kv_offset + window + 1]
    if chunk:
        edge = (kv_offset // chunk + 1) * chunk
        rows += [edge - 1, edge]
    if pattern.packed is not None:  # (its rows index the sequence index: those inside the queries)
        first = pattern.offsets()[:8].long() % q_length
        rows += (first + q_offset).tolist() + (first + q_offset + 1).tolist()
        rows = [r for r in rows if q_offset <= r < q_offset + q_length]
    q = _torch.tensor(rows, dtype=_torch.long)
    want = pattern.rows(q - q_offset)
    batch = _torch.zeros((), dtype=_torch.long)
    if pattern.packed is not None:
        batch = _torch.arange(pattern.shape[0])[:, None, None]
    kv = _torch.arange(kv_length)[None, :] + kv_offset
    got = mask_function(batch, _torch.zeros((), dtype=_torch.long), q[:, None], kv)  # (broadcast where it ignores
    # the keys: bidirectional)
    try:
        return _torch.broadcast_shapes(got.shape, want.shape) == want.shape and bool((got == want).all())
    except RuntimeError:  # shapes that do not broadcast: not the pattern
        return False


def build_mask(batch_size: int, q_length: int, kv_length: int, q_offset=0, kv_offset=0,
               mask_function=_causal, attention_mask=None, local_size=None, allow_is_causal_skip: bool = True,
               allow_is_bidirectional_skip: bool = False, use_vmap: bool = False, device="cpu", **kwargs):
    """The mask function registered for NAME: transformers' sdpa_mask (same arguments, same result), except
    that a causal or bidirectional mask, with or without a sliding window and key padding, a chunked causal one
    without left padding and a packed batch's causal one (_pattern says which) are returned as a PatternMask
    rather than formed (None stays None where sdpa_mask gives None). Anything else (a model's own and/or mask
    functions, a left-padded batch's chunks, a packed batch's chunks, tracing) is sdpa_mask's."""
    def formed():
        return _sdpa_mask(batch_size=batch_size, q_length=q_length, kv_length=kv_length, q_offset=q_offset,
                          kv_offset=kv_offset, mask_function=mask_function, attention_mask=attention_mask,
                          local_size=local_size, allow_is_causal_skip=allow_is_causal_skip,
                          allow_is_bidirectional_skip=allow_is_bidirectional_skip, use_vmap=use_vmap,
                          device=device, **kwargs)

    pattern = _pattern(mask_function)
    if (pattern is None or use_vmap or type(q_offset) is not int or type(kv_offset) is not int
            or _torch.compiler.is_compiling() or _torch.jit.is_tracing()):
        return formed()
    padding = None
    if attention_mask is not None:  # a padding mask [B, positions], read as sdpa_mask reads it (nonzero: a key)
        if attention_mask.ndim != 2 or attention_mask.shape[0] != batch_size:
            return formed()
        padding = attention_mask[:, kv_offset:kv_offset + kv_length].bool()
        if padding.shape[1] < kv_length:  # sdpa_mask pads a short one with zeros: those keys hidden
            padding = _torch.nn.functional.pad(padding, (0, kv_length - padding.shape[1]))
    # (transformers' tests read the padding as sdpa_mask hands it over: ones count, beside a prefill's q_length;
    # sdpa_mask asks them in this order whatever the mask function)
    if allow_is_causal_skip and _ignore_causal_mask_sdpa is not None and _ignore_causal_mask_sdpa(
            padding, q_length, kv_length, q_offset, kv_offset, local_size):
        return None
    if allow_is_bidirectional_skip and _ignore_bidirectional_mask_sdpa is not None and _ignore_bidirectional_mask_sdpa(
            padding, kv_length, local_size):
        return None
    if padding is not None and bool(padding.all()):
        padding = None
    packed = pattern["packed"]
    if packed is not None and (padding is not None or packed.shape != (batch_size, q_length) or q_length != kv_length
                               or q_offset or kv_offset):
        return formed()  # transformers packs a batch without a cache or padding: anything else is not that
    mask = PatternMask(batch_size, q_length, kv_length, q_offset, kv_offset, padding=padding, device=device, **pattern)
    return mask if _is_pattern(mask_function, mask) else formed()


def attention_forward(module, query, key, value, attention_mask: Optional["_torch.Tensor"], dropout: float = 0.0,
                      scaling: Optional[float] = None, sliding_window: Optional[int] = None,
                      softcap: Optional[float] = None, is_causal: Optional[bool] = None, **kwargs):
    """transformers' attention signature: query (B, Hq, Nq, D), key/value (B, Hkv, Nk, D) -> ((B, Nq, Hq, Dv), None).

    dropout: the module's attention dropout, which transformers passes only in training mode (sdpa's
    dropout_p, seeded from torch's default generator).
    s_aux: gpt-oss's attention sinks, one learned logit per query head, passed as sdpa's sinks (in float32,
    whatever the model's dtype; the gradient flows back to the parameter).
    Raises ValueError for what sdpa does not compute (position biases) and TypeError for a model in a
    dtype the kernel does not take (float64), each naming the argument.
    """
    for unsupported in ("position_bias",):
        if kwargs.get(unsupported) is not None:
            raise ValueError(f"{unsupported}: not supported by the {NAME!r} attention backend; use "
                             f"attn_implementation='eager' for this model")
    if kwargs.get("output_attentions"):
        raise ValueError(f"output_attentions: the {NAME!r} backend never forms the attention weights; use "
                         f"attn_implementation='eager' to get them")
    causal_model = is_causal if is_causal is not None else getattr(module, "is_causal", True)
    sinks = kwargs.get("s_aux")
    if sinks is not None and sinks.dtype != _torch.float32:
        sinks = sinks.float()  # a bf16 model's sinks: widened exactly, differentiably
    layer = getattr(key, "_sdpa_quantized", None)
    if layer is not None:
        return _quantized_attention(module, layer, query, attention_mask, dropout, scaling, sliding_window, softcap,
                                    causal_model, sinks, kwargs)
    nq, nk = query.shape[2], key.shape[2]
    mask = attention_mask
    if isinstance(mask, PatternMask) and mask.packed is not None and mask.shape[2] == mask.shape[3] == nq == nk:
        return _packed(query, key, value, mask, sinks, scaling, softcap, dropout), None
    if isinstance(mask, PatternMask):
        calls = mask.pieces(nq, nk)
        if calls is not None:  # the pattern as options, without its booleans (a call for each chunk with chunks)
            outs = [_attend(_at_positions(query, rows), _at_positions(key, keys), _at_positions(value, keys), keep,
                            sinks, scaling, causal, window, softcap, dropout)
                    for rows, keys, causal, window, keep in calls]
            return (outs[0] if len(outs) == 1 else _torch.cat(outs, dim=1)), None
        mask = mask.dense()
    causal = window = None
    if mask is not None:
        if mask.ndim != 4:
            raise ValueError(f"attention_mask: expected the 4D [B, 1|H, Nq, Nk] mask transformers builds, got shape "
                             f"{tuple(mask.shape)}")
        mask = mask[:, :, :, :nk]  # a static cache's mask may be longer than the keys given
    elif causal_model and nq > 1:
        # transformers drops the mask only where top-left is the right alignment (see the module doc)
        causal = "top-left"
        if sliding_window is not None:
            window = (sliding_window - 1, 0)  # transformers: key visible iff q_idx - kv_idx < sliding_window
    return _attend(query, key, value, mask, sinks, scaling, causal, window, softcap, dropout), None


def _packed(query, key, value, mask: PatternMask, sinks, scaling, softcap, dropout):
    """A packed batch's attention, (B, N, Hq, Dv): its B·N tokens as one varlen call (sdpa.attention_varlen),
    each sequence causal within itself (with the pattern's window), no score across two sequences computed. The
    [B, H, N, D] tensors are read as [B·N, H, D] (a view where transformers' projections left them in (B, N, H, D)
    order, else a copy), and the output comes back in the layout the model reads."""
    B, Hq, N, _ = query.shape
    packed = [x.transpose(1, 2).reshape(B * N, x.shape[1], x.shape[3]) for x in (query, key, value)]
    offsets = mask.offsets()
    window = None if mask.window is None else (mask.window - 1, 0)
    try:
        out = _api.attention_varlen(*packed, offsets, offsets, scale=scaling, causal="top-left", window=window,
                                    softcap=softcap, sinks=sinks, dropout_p=dropout)
    except (TypeError, ValueError) as e:
        raise _renamed(e) from None
    return out.view(B, N, Hq, out.shape[2])


def _at_positions(x, positions: slice):
    """x (B, H, N, D) at the positions `positions` (a view; x itself for all of them)."""
    return x if positions == slice(None) else x[:, :, positions]


def _attend(query, key, value, mask, sinks, scaling, causal, window, softcap, dropout):
    """One kernel call of attention_forward: (B, Nq, Hq, Dv), by the inference route where it applies, else by
    sdpa.attention (autograd, dropout, a float mask), whose errors are named in transformers' terms."""
    if not dropout:
        out = _inference(query, key, value, mask, sinks, scaling, causal, window, softcap)
        if out is not None:
            return out
    try:
        out = _api.attention(query, key, value, scale=scaling, causal=causal, window=window, softcap=softcap,
                             mask=mask, sinks=sinks, dropout_p=dropout)
    except (TypeError, ValueError) as e:
        raise _renamed(e) from None
    return out.transpose(1, 2)


def _inference(query, key, value, mask, sinks, scaling, causal, window, softcap):
    """The call of a model in inference (no gradient, nothing tracing): the layer's options checked once and
    cached (_core._scalar_options), the tensors handed to the kernel as they are, the output written in the
    [B, Nq, Hq, Dv] layout the model reads next (no copy). None where this route does not apply (a float mask,
    autograd, tracing) or the call fails: attention_forward's full path then runs it, or names the error."""
    if mask is not None and mask.dtype != _torch.bool:
        return None
    try:
        if _core._torch_route(query, key, value, mask, sinks) != "direct":
            return None
        opts = _core._scalar_options(scaling, causal, window, softcap)
        keep = None if mask is None else mask.view(_torch.uint8)
        return _core._forward_bnhd(query, key, value, opts, keep, sinks)
    except (TypeError, ValueError, BufferError, RuntimeError):  # BufferError: DLPack refuses the tensor (meta)
        return None


class GrowingLayer(DynamicLayer):
    """A DynamicLayer whose keys and values live in buffers [B, H, capacity, D] with room to grow: update()
    writes the new tokens in place after the cached ones and returns views of the first `length` positions
    (strided over the capacity, which the kernel reads as they are). DynamicLayer concatenates instead, a copy
    of the whole cache per layer and step (at a 32k context, more time than the attention itself).

    A full buffer is replaced by one with room for `need + max(min_room, need * growth)` positions (geometric:
    the copies cost O(1) per token, amortised; growth 0.25 holds at most a quarter more than the tokens).
    Anything that replaces .keys (crop keeps the view; reorder_cache, batch_select_indices and
    batch_repeat_interleave do not) is adopted at the next update as the new contents."""

    def __init__(self, growth: float = 0.25, min_room: int = 256, **kwargs):
        super().__init__(**kwargs)
        if not growth > 0 or min_room < 1:
            raise ValueError(f"growth, min_room: need growth > 0 and min_room >= 1, got {growth}, {min_room}")
        self.growth, self.min_room = growth, int(min_room)
        self._k_buf = self._v_buf = None

    def _owns(self, key_states, value_states) -> bool:
        """Whether .keys/.values are still the leading views of this layer's buffers, and the new tokens fit
        their batch, heads, head dims and dtype."""
        kb, vb = self._k_buf, self._v_buf
        if kb is None or self.keys.numel() == 0:
            return False
        same = (self.keys.data_ptr() == kb.data_ptr() and self.values.data_ptr() == vb.data_ptr()
                and self.keys.stride() == kb.stride() and self.values.stride() == vb.stride())
        fits = (key_states.dtype == kb.dtype and value_states.dtype == vb.dtype
                and key_states.shape[:2] + key_states.shape[3:] == kb.shape[:2] + kb.shape[3:]
                and value_states.shape[:2] + value_states.shape[3:] == vb.shape[:2] + vb.shape[3:])
        return same and fits

    def update(self, key_states, value_states, *args, **kwargs):
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        length = self.get_seq_length()
        need = length + key_states.shape[-2]
        if not self._owns(key_states, value_states) or need > self._k_buf.shape[2]:
            capacity = need + max(self.min_room, int(need * self.growth))
            old_k, old_v = (self.keys, self.values) if length else (None, None)
            self._k_buf = key_states.new_empty(key_states.shape[:2] + (capacity,) + key_states.shape[3:])
            self._v_buf = value_states.new_empty(value_states.shape[:2] + (capacity,) + value_states.shape[3:])
            if length:
                self._k_buf[:, :, :length].copy_(old_k)
                self._v_buf[:, :, :length].copy_(old_v)
        self._k_buf[:, :, length:need].copy_(key_states)
        self._v_buf[:, :, length:need].copy_(value_states)
        self.keys, self.values = self._k_buf[:, :, :need], self._v_buf[:, :, :need]
        return self.keys, self.values

    def reset(self) -> None:
        super().reset()
        self._k_buf = self._v_buf = None


class GrowingCache(DynamicCache):
    """transformers' DynamicCache with its full-attention layers as GrowingLayer (tokens appended in place);
    sliding-window layers stay transformers' own (they hold at most the window). For generate():

        out = model.generate(ids, past_key_values=sdpa.transformers.GrowingCache(config=model.config), ...)

    The same tokens as DynamicCache (the same keys and values, read in place); growth and min_room as
    GrowingLayer's."""

    def __init__(self, *args, growth: float = 0.25, min_room: int = 256, **kwargs):
        super().__init__(*args, **kwargs)
        _replace_full_layers(self, lambda: GrowingLayer(growth=growth, min_room=min_room))


def _replace_full_layers(cache, make) -> None:
    """A DynamicCache's full-attention layers (DynamicLayer, present or made later) replaced by make()'s, the
    contents of those already filled moved over; sliding layers stay transformers' own."""
    make()  # the arguments checked now, not at the first update
    if cache.layer_class_to_replicate is DynamicLayer:
        cache.layer_class_to_replicate = make
    for i, layer in enumerate(cache.layers):
        if type(layer) is DynamicLayer:
            new = make()
            if layer.is_initialized and layer.keys.numel():
                new.update(layer.keys, layer.values)
            cache.layers[i] = new


def _quantized_attention(module, layer, query, attention_mask, dropout, scaling, sliding_window, softcap,
                         causal_model, sinks, kwargs):
    """attention_forward over a QuantizedLayer: its codes and scales handed to the kernel where they lie
    (attention_with_kvcache over the layer's L tokens, bottom-right causal for a chunk), the step's new tokens
    quantized into the cache by the same call. A boolean mask that hides keys (a padded batch) cannot be said by
    lengths alone: the layer's values are then dequantized into a float copy and the usual route runs it with
    the mask."""
    if dropout or (_torch.is_grad_enabled() and query.requires_grad):
        raise ValueError(f"QuantizedCache: inference only (no dropout, no gradient); call the model under "
                         f"torch.no_grad() with {NAME!r}, or use a float cache to train")
    length, nq = layer.get_seq_length(), query.shape[2]
    causal = bool(causal_model and nq > 1)
    mask = attention_mask
    if isinstance(mask, PatternMask) and mask.kernel_options(nq, length) == ("bottom-right", None, None):
        mask = None  # what the lengths and `causal` say (for one query: every key)
    if mask is not None and mask.dtype == _torch.bool and mask.ndim == 4:
        # transformers' mask for a chunk over the cache is bottom-right causal (or all True for one query):
        # what the lengths and `causal` say already
        seen = mask[..., :length]
        pattern = _torch.ones((nq, length), dtype=_torch.bool).tril(length - nq)
        if bool(seen.all()) or (causal and bool((seen == pattern).all())):
            mask = None
    if mask is not None:
        keys, values = layer.dequantized(query.dtype)
        return attention_forward(module, query, keys, values, attention_mask, dropout, scaling, sliding_window,
                                 softcap, causal_model, **kwargs)
    window = None if sliding_window is None else (sliding_window - 1, 0)
    out = _quantized_inference(layer, query, sinks, scaling, causal, window, softcap)
    if out is None:
        k_cache, v_cache = layer.caches()
        held, k_new, v_new = layer._take_pending()
        try:
            out = _api.attention_with_kvcache(query.transpose(1, 2), k_cache, v_cache, k_new, v_new,
                                              cache_seqlens=held, causal=causal, window=window, softcap=softcap,
                                              sinks=sinks, scale=scaling)
        except (TypeError, ValueError) as e:
            raise _renamed(e) from None
        layer._appended()
    return out, None


def _quantized_inference(layer, query, sinks, scaling, causal, window, softcap):
    """The call of a decoding step or a chunk over a QuantizedLayer, as _inference is the float caches': the
    options checked once and cached (_api._kvcache_options), the layer's codes and scales as views made when
    its buffers were, and the step's new tokens appended by the kernel's own call (no quantize_kv of their own):
    attention_with_kvcache's extension call with nothing checked in Python. None where it does not apply
    (tracing, a hook wrapping the tensors) or the call fails (the library checks everything before it writes
    the cache): _quantized_attention's full call then runs it, or names the error."""
    try:
        if _core._torch_route(query, sinks) != "direct":
            return None
        opts = _api._kvcache_options(scaling, causal, window, softcap)
        held, k_new, v_new = layer._take_pending()
        kc, ks, vc, vs = layer._kernel_views
        B, Hq, Nq, _ = query.shape
        out = _torch.empty((B, Nq, Hq, vc.shape[3]), dtype=query.dtype)
        seqlens = _torch.full((B,), held, dtype=_torch.int32)
        args = _core._fast_args("torch", query.transpose(1, 2), kc, vc, ks, vs, seqlens, k_new, v_new, out, sinks)
        _api._ext.forward_kvcache_quantized(*args[:5], layer.format, args[5], None, *args[6:9], None, sinks=args[9],
                                            **opts)
    except (TypeError, ValueError, BufferError, RuntimeError):
        return None
    layer._appended()
    return out


class QuantizedLayer(DynamicLayer):
    """A cache layer stored in 8 bits: keys and values quantized (sdpa.quantize_kv's format:
    "int8" or "fp8_e4m3", one float32 scale per token and kv head) into buffers [B, Hkv, capacity, D] with room
    to grow (min_room, growth as GrowingLayer's), and read by the 'exact_cpu' backend where they lie: the
    kernel converts the codes as it reads them (in registers when decoding, a key tile at a time for a chunk),
    so no float copy of the cache is made (a padded batch's mask, which lengths cannot say, reads a
    dequantized copy).

    update() returns stand-ins for the keys and values: tensors on the meta device (no data) of the shape
    and dtype the float cache would return, which 'exact_cpu' recognises; any other attention backend fails
    on them loudly rather than reading wrong numbers. The new tokens wait, unquantized, for the attention call
    that follows update() in every transformers layer: 'exact_cpu' hands them to the kernel, which quantizes
    them into the cache as it attends (FlashAttention's k, v arguments; one call instead of a quantize_kv per
    tensor, ~40 us a layer and step, docs/python.md). Anything else that reads the layer (dequantized, caches,
    a second update, crop, reorder_cache, batch_select_indices, batch_repeat_interleave, flush) quantizes them first,
    with the same codes (one row quantizer in the library); a NaN or an infinity among them is refused there,
    with sdpa.Error, and stays waiting."""

    def __init__(self, format: str = "int8", growth: float = 0.25, min_room: int = 256, **kwargs):
        super().__init__(**kwargs)
        if format not in _api._KV_FORMATS:
            raise ValueError(f"format: expected 'int8' or 'fp8_e4m3', got {format!r}")
        if not growth > 0 or min_room < 1:
            raise ValueError(f"growth, min_room: need growth > 0 and min_room >= 1, got {growth}, {min_room}")
        self.format, self.growth, self.min_room = format, growth, int(min_room)
        self._buffers = None  # (k codes, k scales, v codes, v scales): [B, Hkv, capacity, D] uint8, [B, Hkv, cap]
        self._kernel_views = None  # the buffers as the kernel takes them: codes [B, capacity, Hkv, D], scales
        self._length = 0  # tokens quantized into the buffers
        self._pending = None  # (keys, values) [B, Hkv, n, D] of the last update, not yet quantized

    @property
    def nbytes(self) -> int:
        """Bytes the layer holds (codes and scales, at its capacity)."""
        return 0 if self._buffers is None else sum(b.numel() * b.element_size() for b in self._buffers)

    def get_seq_length(self) -> int:
        if not self.is_initialized:
            return 0
        return self._length + (0 if self._pending is None else self._pending[0].shape[2])

    def _set_buffers(self, buffers) -> None:
        self._buffers = buffers
        kc, ks, vc, vs = buffers
        self._kernel_views = (kc.transpose(1, 2), ks, vc.transpose(1, 2), vs)

    def _stand_ins(self):
        kc, _, vc, _ = self._buffers
        B, H, _, Dk = kc.shape
        n = self.get_seq_length()
        self.keys = _torch.empty((B, H, n, Dk), dtype=self._dtype, device="meta")
        self.values = _torch.empty((B, H, n, vc.shape[3]), dtype=self._dtype, device="meta")
        self.keys._sdpa_quantized = self.values._sdpa_quantized = self

    def update(self, key_states, value_states, *args, **kwargs):
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        if key_states.device.type != "cpu":
            raise TypeError(f"QuantizedCache: keys on {key_states.device}; the 'exact_cpu' backend's caches are CPU")
        self.flush()
        self._dtype = key_states.dtype
        B, H, n, Dk = key_states.shape
        Dv = value_states.shape[3]
        need = self._length + n
        buffers = self._buffers
        if buffers is not None and (buffers[0].shape[:2] != (B, H) or buffers[0].shape[3] != Dk
                                    or buffers[2].shape[3] != Dv):
            raise ValueError(f"QuantizedCache: new tokens {tuple(key_states.shape)} do not fit the layer's "
                             f"[B, Hkv, L, D] = {tuple(buffers[0].shape[:2])}, Dk {buffers[0].shape[3]}")
        if buffers is None or need > buffers[0].shape[2]:
            capacity = need + max(self.min_room, int(need * self.growth))
            grown = (_torch.zeros((B, H, capacity, Dk), dtype=_torch.uint8), _torch.zeros((B, H, capacity)),
                     _torch.zeros((B, H, capacity, Dv), dtype=_torch.uint8), _torch.zeros((B, H, capacity)))
            if buffers is not None:
                for old, new in zip(buffers, grown):
                    new[:, :, :self._length].copy_(old[:, :, :self._length])
            self._set_buffers(grown)
        self._pending = (key_states.detach(), value_states.detach())
        self._stand_ins()
        return self.keys, self.values

    def _take_pending(self):
        """(tokens held in the buffers, the waiting keys and values as the kernel takes new tokens, [B, n, Hkv, D],
        or None, None): for a call that appends them, which then calls _appended()."""
        if self._pending is None:
            return self._length, None, None
        k, v = self._pending
        return self._length, k.transpose(1, 2), v.transpose(1, 2)

    def _appended(self) -> None:
        """The waiting tokens are in the buffers (a kernel call appended them)."""
        if self._pending is not None:
            self._length += self._pending[0].shape[2]
            self._pending = None

    def flush(self) -> None:
        """Quantizes the waiting tokens into the buffers now (sdpa.quantize_kv: the row quantizer the kernel's
        append uses, so the same codes), for a caller that reads caches() itself; a NaN or an infinity among them
        raises sdpa.Error, and they stay waiting."""
        if self._pending is None:
            return
        _, k_new, v_new = self._take_pending()
        kc, ks, vc, vs = self._kernel_views
        end = self._length + k_new.shape[1]
        with _torch.no_grad():
            for name, x, codes, scales in (("key:", k_new, kc, ks), ("value:", v_new, vc, vs)):
                try:
                    q = _api.quantize_kv(x, self.format)  # codes [B, n, H, D], scales [B, H, n]
                except (TypeError, ValueError) as e:
                    raise _renamed(e, (("x:", name),)) from None
                codes[:, self._length:end].copy_(q.codes)
                scales[:, :, self._length:end].copy_(q.scales)
        self._appended()

    def caches(self):
        """(k_cache, v_cache): sdpa.QuantizedKV views [B, capacity, Hkv, D] of the buffers, as
        attention_with_kvcache takes them (positions beyond the tokens held unread). The waiting tokens are not
        in them (flush() puts them there; _take_pending() says which they are)."""
        kc, ks, vc, vs = self._kernel_views
        return _api.QuantizedKV(kc, ks, self.format), _api.QuantizedKV(vc, vs, self.format)

    def dequantized(self, dtype=None):
        """The layer's keys and values as float tensors [B, Hkv, L, D] (dtype: the model's by default)."""
        self.flush()
        L = self._length
        k_cache, v_cache = self.caches()
        out = []
        for c in (k_cache, v_cache):
            part = _api.QuantizedKV(c.codes[:, :L], c.scales[:, :, :L], self.format)
            out.append(part.dequantize().transpose(1, 2).to(dtype or self._dtype))
        return tuple(out)

    def _select(self, pick) -> None:
        self.flush()
        if self._buffers is not None and self._length:
            self._set_buffers(tuple(pick(b) for b in self._buffers))
            self._stand_ins()

    def crop(self, tokens_to_remove: int) -> None:
        if tokens_to_remove > 0:
            raise ValueError(f"crop: a negative count of tokens to remove, got {tokens_to_remove}")
        self.flush()
        if tokens_to_remove and self.is_initialized:
            self._length = max(0, self._length + tokens_to_remove)
            self._stand_ins()

    def reorder_cache(self, beam_idx) -> None:
        self._select(lambda b: b.index_select(0, beam_idx.cpu()))

    def batch_select_indices(self, indices) -> None:
        self._select(lambda b: b[indices].contiguous())

    def batch_repeat_interleave(self, repeats: int) -> None:
        self._select(lambda b: b.repeat_interleave(repeats, dim=0))

    def reset(self) -> None:
        super().reset()
        self._buffers = self._kernel_views = self._pending = None
        self._length = 0


class QuantizedCache(DynamicCache):
    """transformers' DynamicCache with its full-attention layers stored in 8 bits (QuantizedLayer: "int8" or
    "fp8_e4m3"), read by the 'exact_cpu' backend without a float copy; sliding-window layers stay
    transformers' own (they hold at most the window). For generate():

        cache = sdpa.transformers.QuantizedCache(config=model.config, format="int8")
        out = model.generate(ids, past_key_values=cache, ...)   # `cache=` from transformers 5.24

    The model must use attn_implementation='exact_cpu'. nbytes: the bytes its layers hold (cache_nbytes: codes,
    scales, and the float sliding layers)."""

    def __init__(self, *args, format: str = "int8", growth: float = 0.25, min_room: int = 256, **kwargs):
        super().__init__(*args, **kwargs)
        _replace_full_layers(self, lambda: QuantizedLayer(format=format, growth=growth, min_room=min_room))

    @property
    def nbytes(self) -> int:
        return cache_nbytes(self)


def cache_nbytes(cache) -> int:
    """The bytes a transformers cache's layers hold: a QuantizedLayer's codes and scales and a GrowingLayer's
    buffers at their capacity, any other layer's keys and values."""
    total = 0
    for layer in cache.layers:
        if isinstance(layer, QuantizedLayer):
            total += layer.nbytes
        elif isinstance(layer, GrowingLayer) and layer._k_buf is not None:
            total += sum(t.numel() * t.element_size() for t in (layer._k_buf, layer._v_buf))
        elif getattr(layer, "is_initialized", False) and layer.keys is not None:
            total += sum(t.numel() * t.element_size() for t in (layer.keys, layer.values))
    return total


_NAMES = (("dropout_p:", "dropout:"), ("sinks:", "s_aux:"), ("q:", "query:"), ("k:", "key:"), ("v:", "value:"),
          ("k_new:", "key:"), ("v_new:", "value:"), ("mask:", "attention_mask:"), ("keep:", "attention_mask:"))
_ELEMENT = re.compile(r"^(key|value): element \[(\d+), (\d+), (\d+), (\d+)\]")


def _renamed(error: Exception, names=_NAMES) -> Exception:
    """_core.renamed in transformers' terms, an element's index included: the library names an element of the
    [B, N, H, D] view it reads, where transformers' key and value are [B, H, N, D]."""
    error = _core.renamed(error, names)
    found = _ELEMENT.match(str(error))
    if found is None:
        return error
    b, n, h, d = found.group(2, 3, 4, 5)
    return type(error)(f"{found[1]}: element [{b}, {h}, {n}, {d}]" + str(error)[found.end():])


# build_mask takes sdpa_mask's arguments as transformers names them from 5.4 (q_length, q_offset); a release whose
# sdpa_mask takes others (cache_position: 4.53 to 5.3) gets its own sdpa_mask registered, every mask formed as before
_MASK_ARGS = ("batch_size", "q_length", "kv_length", "q_offset", "kv_offset", "mask_function", "attention_mask",
              "local_size", "allow_is_causal_skip", "allow_is_bidirectional_skip", "use_vmap", "device")


def _forwards_to(mask_builder) -> bool:
    """Whether build_mask's arguments are all mask_builder's (transformers' sdpa_mask of this release)."""
    return set(_MASK_ARGS) <= set(inspect.signature(mask_builder).parameters)


_PATTERNS = _forwards_to(_sdpa_mask)
_MASK_BUILDER = build_mask if _PATTERNS else _sdpa_mask  # what NAME's users get (the benchmarks register it too)

AttentionInterface.register(NAME, attention_forward)
AttentionMaskInterface.register(NAME, _MASK_BUILDER)

__all__ = ["NAME", "MIN_TRANSFORMERS", "attention_forward", "build_mask", "PatternMask", "GrowingCache", "GrowingLayer",
           "QuantizedCache", "QuantizedLayer", "cache_nbytes"]

"""sdpa as a Hugging Face transformers attention backend.

    import sdpa.transformers
    model = AutoModelForCausalLM.from_config(cfg, attn_implementation=sdpa.transformers.NAME)

Importing this module registers `attention_forward` with transformers' AttentionInterface
and transformers' own boolean mask builder (`masking_utils.sdpa_mask`) with
AttentionMaskInterface, both under NAME = "exact_cpu". The name holds no "sdpa" on
purpose: transformers takes any such name for PyTorch's SDPA and refuses it for models
PyTorch's SDPA cannot serve (Gemma2's soft-capping among them).

What reaches sdpa: grouped-query attention with K and V at their own head count (no
repeat), the model's scaling (1/sqrt(d) when absent), soft-capping, and the mask. The mask
contract is the one transformers keeps for its `sdpa` backend: a boolean [B, 1, Nq, Nk]
mask (True takes part; padding, sliding windows and the KV cache's bottom-right causal
alignment all folded in by transformers), or None where the mask would be plain causal —
then causal is top-left for Nq > 1 (a prefill from an empty cache, where top-left is
bottom-right) and absent for one query (decoding sees every cached key). A float mask
passed by the caller is added to the scores, as in eager.
"""

from __future__ import annotations

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

from transformers import AttentionInterface, AttentionMaskInterface, DynamicCache  # noqa: E402
from transformers.cache_utils import DynamicLayer  # noqa: E402
from transformers.masking_utils import sdpa_mask as _sdpa_mask  # noqa: E402


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
    nq, nk = query.shape[2], key.shape[2]
    causal = None
    window = None
    mask = attention_mask
    if mask is not None:
        if mask.ndim != 4:
            raise ValueError(f"attention_mask: expected the 4D [B, 1|H, Nq, Nk] mask transformers builds, got shape "
                             f"{tuple(mask.shape)}")
        mask = mask[:, :, :, :nk]  # a static cache's mask may be longer than the keys given
    else:
        causal_model = is_causal if is_causal is not None else getattr(module, "is_causal", True)
        if causal_model and nq > 1:
            # transformers drops the mask only where top-left is the right alignment (see the module doc)
            causal = "top-left"
            if sliding_window is not None:
                window = (sliding_window - 1, 0)  # transformers: key visible iff q_idx - kv_idx < sliding_window
    sinks = kwargs.get("s_aux")
    if sinks is not None and sinks.dtype != _torch.float32:
        sinks = sinks.float()  # a bf16 model's sinks: widened exactly, differentiably
    if not dropout:
        out = _inference(query, key, value, mask, sinks, scaling, causal, window, softcap)
        if out is not None:
            return out, None
    try:
        out = _api.attention(query, key, value, scale=scaling, causal=causal, window=window, softcap=softcap,
                             mask=mask, sinks=sinks, dropout_p=dropout)
    except (TypeError, ValueError) as e:
        raise _core.renamed(e, _NAMES) from None
    return out.transpose(1, 2), None


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
        make = lambda: GrowingLayer(growth=growth, min_room=min_room)  # noqa: E731
        make()  # the arguments checked now, not at the first update
        if self.layer_class_to_replicate is DynamicLayer:
            self.layer_class_to_replicate = make
        for i, layer in enumerate(self.layers):
            if type(layer) is DynamicLayer:
                grown = make()
                if layer.is_initialized:
                    grown.update(layer.keys, layer.values)
                self.layers[i] = grown


_NAMES = (("dropout_p:", "dropout:"), ("sinks:", "s_aux:"), ("q:", "query:"), ("k:", "key:"), ("v:", "value:"), ("mask:", "attention_mask:"), ("keep:", "attention_mask:"))


AttentionInterface.register(NAME, attention_forward)
AttentionMaskInterface.register(NAME, _sdpa_mask)

__all__ = ["NAME", "MIN_TRANSFORMERS", "attention_forward", "GrowingCache", "GrowingLayer"]

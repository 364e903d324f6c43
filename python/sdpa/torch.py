"""sdpa for PyTorch: a drop-in ``scaled_dot_product_attention`` with autograd, and the custom ops
``torch.ops.sdpa.forward`` / ``torch.ops.sdpa.backward`` it runs through (torch.compile, torch.export).

``import sdpa`` does not need PyTorch; this module does, and says so when it is missing.
The forward and the backward are the library's own (sdpa::forward, sdpa::backward) on
CPU float32, float16 or bfloat16 tensors, read and written in place through their strides.
"""

from __future__ import annotations

from . import _ops  # noqa: F401  (registers torch.ops.sdpa.*; says how to install PyTorch where it is missing)
from . import _api, _core
from ._api import attention  # noqa: F401  (sdpa.attention takes tensors too)

import torch as _torch  # noqa: E402  (importable: _ops imported it)

__all__ = ["scaled_dot_product_attention", "attention"]


def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
                                 enable_gqa=False):
    """torch.nn.functional.scaled_dot_product_attention, computed by sdpa on the CPU.

    Same arguments and result where the semantics match: query [..., Hq, L, E], key [..., Hkv, S, E],
    value [..., Hkv, S, Ev] with up to two leading dimensions (rank 2 to 4); attn_mask bool (True
    takes part) or float (added), broadcastable to [..., Hq, L, S]; is_causal is the top-left
    alignment (key j visible to query i iff j <= i); scale defaults to 1/sqrt(E); enable_gqa lets
    Hq be a multiple of Hkv. Differentiable in query, key and value (not in attn_mask). dropout_p
    drops each attention probability with that probability and scales the kept ones by
    1/(1 - dropout_p), as PyTorch does; the mask comes from sdpa's own generator (Philox) keyed by
    a seed drawn from torch's default CPU generator, so torch.manual_seed makes a call repeatable
    (the bits differ from PyTorch's own dropout mask) and the backward regenerates the same mask.

    Differences: CPU tensors of float32, float16 or bfloat16 only, one dtype for query, key and value
    (TypeError/ValueError otherwise; float16/bfloat16 are computed in float32 and rounded once, and
    their gradients come back in the same dtype); a query whose keys are all masked gets output 0
    rather than NaN; is_causal may be combined with attn_mask (both apply) where PyTorch refuses the
    pair.
    """
    for name, x in (("query", query), ("key", key), ("value", value)):
        if not isinstance(x, _torch.Tensor):
            raise TypeError(f"{name}: expected a torch.Tensor, got {type(x).__module__}.{type(x).__name__}")
    if not isinstance(is_causal, bool):
        raise TypeError(f"is_causal: expected a bool, got {is_causal!r}")
    if not isinstance(enable_gqa, bool):
        raise TypeError(f"enable_gqa: expected a bool, got {enable_gqa!r}")
    kind = _core._check_tensors({"query": query, "key": key, "value": value}, "query", half_ok=True)
    if query.ndim >= 3:
        lead_q, lead_k, lead_v = query.shape[:-3], key.shape[:-3], value.shape[:-3]
        if lead_k != lead_q or lead_v != lead_q:
            raise ValueError(f"key, value: batch dimensions {tuple(lead_k)}, {tuple(lead_v)} differ from query's "
                             f"{tuple(lead_q)} (shapes {tuple(query.shape)}, {tuple(key.shape)}, {tuple(value.shape)})")
        hq, hk, hv = query.shape[-3], key.shape[-3], value.shape[-3]
        if hk != hv:
            raise ValueError(f"value: {hv} heads differ from key's {hk}")
        if hq != hk:
            if not enable_gqa:
                raise ValueError(f"key: {hk} heads differ from query's {hq}; pass enable_gqa=True for grouped-query "
                                 f"attention")
            if hq % hk:
                raise ValueError(f"key: query heads {hq} are not a multiple of key/value heads {hk}")
    if query.shape[-1] != key.shape[-1]:
        raise ValueError(f"key: embedding size {key.shape[-1]} differs from query's {query.shape[-1]}")
    if key.shape[-2] != value.shape[-2]:
        raise ValueError(f"value: sequence length {value.shape[-2]} differs from key's {key.shape[-2]}")
    if attn_mask is not None and not isinstance(attn_mask, _torch.Tensor):
        raise TypeError(f"attn_mask: expected a torch.Tensor or None, got {type(attn_mask).__name__}")
    try:
        return _api._attention(query, key, value, {"scale": scale, "causal": "top-left" if is_causal else None,
                                                   "mask": attn_mask, "dropout_p": dropout_p}, kind=kind)
    except (TypeError, ValueError) as e:
        raise _core.renamed(e, _TORCH_NAMES) from None


_TORCH_NAMES = (("q:", "query:"), ("k:", "key:"), ("v:", "value:"), ("mask:", "attn_mask:"), ("keep:", "attn_mask:"))


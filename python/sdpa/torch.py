"""sdpa for PyTorch: a drop-in ``scaled_dot_product_attention`` with autograd.

``import sdpa`` does not need PyTorch; this module does, and says so when it is missing.
The forward and the backward are the library's own (sdpa::forward, sdpa::backward) on
CPU float32 tensors, read and written in place through their strides.
"""

from __future__ import annotations

try:
    import torch as _torch
    from torch.autograd.function import once_differentiable as _once_differentiable
except ImportError as _e:  # pragma: no cover - exercised only without torch
    raise ImportError(
        "sdpa.torch needs PyTorch, which is not importable here: install it (a CPU build is enough, e.g. "
        "pip install torch --index-url https://download.pytorch.org/whl/cpu); "
        "sdpa.attention works on NumPy arrays without it"
    ) from _e

from . import _api
from ._api import attention  # noqa: F401  (sdpa.attention takes tensors too)

__all__ = ["scaled_dot_product_attention", "attention"]


class _SdpaFunction(_torch.autograd.Function):
    """out, lse = attention(q, k, v) on rank-4 tensors; backward by sdpa::backward.

    Saves q, k, v, out and lse (the backward recomputes the probabilities from lse, so
    nothing of size Nq x Nk is kept). lse is returned but not differentiable.
    """

    @staticmethod
    def forward(ctx, q, k, v, opts):
        out, lse = _api._forward4("torch", q, k, v, opts)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.opts = opts
        ctx.mark_non_differentiable(lse)
        return out, lse

    @staticmethod
    @_once_differentiable
    def backward(ctx, dout, _dlse):
        q, k, v, out, lse = ctx.saved_tensors
        if dout.dtype != _torch.float32:  # e.g. a float64 loss upstream
            dout = dout.float()
        dq, dk, dv = _api._backward4("torch", q, k, v, out, lse, dout, ctx.opts)
        return dq, dk, dv, None


def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
                                 enable_gqa=False):
    """torch.nn.functional.scaled_dot_product_attention, computed by sdpa on the CPU.

    Same arguments and result where the semantics match: query [..., Hq, L, E], key [..., Hkv, S, E],
    value [..., Hkv, S, Ev] with up to two leading dimensions (rank 2 to 4); attn_mask bool (True
    takes part) or float (added), broadcastable to [..., Hq, L, S]; is_causal is the top-left
    alignment (key j visible to query i iff j <= i); scale defaults to 1/sqrt(E); enable_gqa lets
    Hq be a multiple of Hkv. Differentiable in query, key and value (not in attn_mask).

    Differences: float32 CPU tensors only (TypeError/ValueError otherwise); dropout_p must be 0 (sdpa
    computes exact attention); a query whose keys are all masked gets output 0 rather than NaN;
    is_causal may be combined with attn_mask (both apply) where PyTorch refuses the pair.
    """
    for name, x in (("query", query), ("key", key), ("value", value)):
        if not isinstance(x, _torch.Tensor):
            raise TypeError(f"{name}: expected a torch.Tensor, got {type(x).__module__}.{type(x).__name__}")
    if dropout_p != 0.0:
        raise ValueError(f"dropout_p: sdpa computes exact attention without dropout, got dropout_p={dropout_p}; "
                         f"pass 0.0 (e.g. dropout_p if self.training else 0.0 only while evaluating)")
    if not isinstance(is_causal, bool):
        raise TypeError(f"is_causal: expected a bool, got {is_causal!r}")
    if not isinstance(enable_gqa, bool):
        raise TypeError(f"enable_gqa: expected a bool, got {enable_gqa!r}")
    _api._check_tensors({"query": query, "key": key, "value": value}, "query")
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
        return _api.attention(query, key, value, scale=scale, causal="top-left" if is_causal else None,
                              mask=attn_mask)
    except TypeError as e:
        raise TypeError(_rename(str(e))) from None
    except ValueError as e:
        raise type(e)(_rename(str(e))) from None


def _rename(msg: str) -> str:
    """The library's argument names in torch's terms."""
    for ours, theirs in (("q:", "query:"), ("k:", "key:"), ("v:", "value:"), ("mask:", "attn_mask:")):
        if msg.startswith(ours):
            return theirs + msg[len(ours):]
    return msg

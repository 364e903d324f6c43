"""sdpa for PyTorch: a drop-in ``scaled_dot_product_attention`` with autograd, and the custom ops
``torch.ops.sdpa.forward`` / ``torch.ops.sdpa.backward`` it runs through (torch.compile, torch.export).

``import sdpa`` does not need PyTorch; this module does, and says so when it is missing.
The forward and the backward are the library's own (sdpa::forward, sdpa::backward) on
CPU float32, float16 or bfloat16 tensors, read and written in place through their strides.
"""

from __future__ import annotations

from typing import Optional as _Optional, Tuple as _Tuple

try:
    import torch as _torch
except ImportError as _e:  # pragma: no cover - exercised only without torch
    raise ImportError(
        "sdpa.torch needs PyTorch, which is not importable here: install it (a CPU build is enough, e.g. "
        "pip install torch --index-url https://download.pytorch.org/whl/cpu); "
        "sdpa.attention works on NumPy arrays without it"
    ) from _e

from . import _api
from ._api import attention  # noqa: F401  (sdpa.attention takes tensors too)

__all__ = ["scaled_dot_product_attention", "attention"]


# ---- the custom ops -----------------------------------------------------------------
# The forward and the backward are torch.library custom ops, so torch.compile traces
# through them without a graph break (it sees an opaque node with a fake implementation
# giving shapes) and torch.export records them as sdpa::forward / sdpa::backward, which
# any process that has imported sdpa.torch can run. Their arguments are exactly those of
# the extension's _ext.forward/_ext.backward minus the preallocated results (the dict
# _api._options builds), so the Python checks stay in one place: sdpa.attention and
# scaled_dot_product_attention check, then call the op where something traces the call —
# else, with autograd, the same bodies through _EagerAutograd, and with neither, the op's
# body _api._forward4 directly (_api._torch_route). Tensors are rank 4.


def _forward_body(q: _torch.Tensor, k: _torch.Tensor, v: _torch.Tensor, mask: _Optional[_torch.Tensor],
                  keep: _Optional[_torch.Tensor], scale: _Optional[float], softcap: _Optional[float], causal: str,
                  window_left: int, window_right: int, threads: int, kernel: str, dropout_p: float, dropout_seed: int,
                  dropout_offset: int) -> _Tuple[_torch.Tensor, _torch.Tensor]:
    """out (B, Hq, Nq, Dv), lse (B, Hq, Nq) = sdpa::forward(q (B, Hq, Nq, Dk), k, v (B, Hkv, Nk, Dk|Dv)).
    With dropout_p > 0 the mask is a pure function of (dropout_seed, dropout_offset) and the position:
    the op is deterministic in its arguments (the seed is drawn before it, by the caller)."""
    return _api._forward4("torch", q, k, v, dict(mask=mask, keep=keep, scale=scale, softcap=softcap, causal=causal,
                                                 window_left=window_left, window_right=window_right,
                                                 threads=threads, kernel=kernel, dropout_p=dropout_p,
                                                 dropout_seed=dropout_seed, dropout_offset=dropout_offset))


_forward_op = _torch.library.custom_op("sdpa::forward", mutates_args=())(_forward_body)


@_forward_op.register_fake
def _(q, k, v, mask, keep, scale, softcap, causal, window_left, window_right, threads, kernel, dropout_p, dropout_seed,
      dropout_offset):
    # The same allocation as _api._forward4: fresh C-contiguous buffers.
    B, Hq, Nq, _ = q.shape
    return q.new_empty((B, Hq, Nq, v.shape[3])), q.new_empty((B, Hq, Nq), dtype=_torch.float32)


def _backward_body(q: _torch.Tensor, k: _torch.Tensor, v: _torch.Tensor, out: _torch.Tensor, lse: _torch.Tensor,
                   dout: _torch.Tensor, mask: _Optional[_torch.Tensor], keep: _Optional[_torch.Tensor],
                   scale: _Optional[float], softcap: _Optional[float], causal: str, window_left: int,
                   window_right: int, threads: int, kernel: str, dropout_p: float, dropout_seed: int,
                   dropout_offset: int) -> _Tuple[_torch.Tensor, _torch.Tensor, _torch.Tensor]:
    """dq, dk, dv = sdpa::backward(...): shaped (and, where dense, laid out) like q, k, v; with dropout, the
    forward's mask regenerated from the same seed and offset."""
    return _api._backward4("torch", q, k, v, out, lse, dout,
                           dict(mask=mask, keep=keep, scale=scale, softcap=softcap, causal=causal,
                                window_left=window_left, window_right=window_right, threads=threads, kernel=kernel,
                                dropout_p=dropout_p, dropout_seed=dropout_seed, dropout_offset=dropout_offset))


_backward_op = _torch.library.custom_op("sdpa::backward", mutates_args=())(_backward_body)


@_backward_op.register_fake
def _(q, k, v, out, lse, dout, mask, keep, scale, softcap, causal, window_left, window_right, threads, kernel,
      dropout_p, dropout_seed, dropout_offset):
    return _torch.empty_like(q), _torch.empty_like(k), _torch.empty_like(v)


_OPTION_NAMES = ("mask", "keep", "scale", "softcap", "causal", "window_left", "window_right", "threads", "kernel",
                 "dropout_p", "dropout_seed", "dropout_offset")


def _setup_context_saving(n_tensors: int):
    """The setup_context of both custom ops, dense and varlen (_varlen_torch.py): each op's first n_tensors inputs
    are tensors (q, k, v and the masks; varlen: also the offsets), the rest its options. Saves those and out, lse:
    the backward recomputes the probabilities from lse (and the dropout mask from the seed and offset among the
    options), so nothing of size Nq x Nk is kept beyond the caller's own mask. lse is an output but not
    differentiable."""
    def setup_context(ctx, inputs, output):
        out, lse = output
        ctx.save_for_backward(*inputs[:n_tensors], out, lse)
        ctx.options = inputs[n_tensors:]
        ctx.mark_non_differentiable(lse)
    return setup_context


_setup_context = _setup_context_saving(5)  # q, k, v, mask, keep


def _backward_by(backward_run):
    """The backward of both autograd routes below, given what computes dq, dk, dv from the saved tensors and
    options (the custom op sdpa::backward, or its body)."""
    def backward(ctx, dout, _dlse):
        q, k, v, mask, keep, out, lse = ctx.saved_tensors
        if dout.dtype != q.dtype:  # e.g. a float32 or float64 loss upstream of a 16-bit out
            dout = dout.to(q.dtype)
        dq, dk, dv = backward_run(q, k, v, out, lse, dout, mask, keep, *ctx.options)
        return (dq, dk, dv) + (None,) * (len(_OPTION_NAMES))
    return backward


_forward_op.register_autograd(_backward_by(_backward_op), setup_context=_setup_context)


class _EagerAutograd(_torch.autograd.Function):
    """The custom op's autograd for an eager call (grad needed, nothing tracing: _api._torch_route): the same
    bodies, saved tensors and backward, without the op's dispatch. That dispatch cost ~200 us of a ~1 ms
    forward + backward at (2, 4, 128, 32) (docs/python.md, "Small calls: where the time goes"): torch.library's
    autograd wrapper reads the op's 15-argument schema once per argument (fill_defaults, ~60 us), and
    each op call redispatches through Python. Traced calls (torch.compile, export, modes, subclasses,
    functorch) still need the op, which they can record; this Function they could not."""

    @staticmethod
    def forward(q, k, v, mask, keep, *options):
        return _forward_body(q, k, v, mask, keep, *options)

    @staticmethod
    def setup_context(ctx, inputs, output):
        _setup_context(ctx, inputs, output)

    @staticmethod
    @_torch.autograd.function.once_differentiable  # no double backward, as with the op
    def backward(ctx, dout, dlse):
        return _eager_backward(ctx, dout, dlse)


_eager_backward = _backward_by(_backward_body)


def _forward(q, k, v, opts: dict, traced: bool = True):
    """out, lse differentiable in q, k, v; opts as _api._options returns it. traced: through the custom op
    (anything that traces or wraps the call needs it), else through _EagerAutograd."""
    run = _forward_op if traced else _EagerAutograd.apply
    return run(q, k, v, *(opts[name] for name in _OPTION_NAMES))


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
    kind = _api._check_tensors({"query": query, "key": key, "value": value}, "query", half_ok=True)
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
        return _api._attention(query, key, value, scale=scale, causal="top-left" if is_causal else None,
                               window=None, softcap=None, mask=attn_mask, return_lse=False, threads=None,
                               kernel="fast", dropout_p=dropout_p, kind=kind)
    except (TypeError, ValueError) as e:
        raise _renamed(e, _TORCH_NAMES) from None


_TORCH_NAMES = (("q:", "query:"), ("k:", "key:"), ("v:", "value:"), ("mask:", "attn_mask:"), ("keep:", "attn_mask:"))


def _renamed(error: Exception, names) -> Exception:
    """The same exception with the library's argument name (the message's first word) in the caller's terms."""
    msg = str(error)
    for ours, theirs in names:
        if msg.startswith(ours):
            msg = theirs + msg[len(ours):]
            break
    return type(error)(msg)

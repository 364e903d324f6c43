"""The custom ops sdpa::forward_varlen / sdpa::backward_varlen behind sdpa.attention_varlen on PyTorch tensors
(imported only when q is a tensor).

As sdpa::forward / sdpa::backward (sdpa/torch.py): torch.library custom ops, so torch.compile traces through
them and torch.export records them, with a fake implementation giving shapes and the autograd registration
calling the backward op. Forward and backward are the library's own (sdpa::forward_varlen,
sdpa::backward_varlen); the saved tensors are q, k, v, the offsets, the packed batch's masks (the caller's own,
if any), out and lse: nothing of size L x L per sequence is made (with dropout, the seed and offset among the
options regenerate the mask).
"""

from __future__ import annotations

from typing import Optional as _Optional, Tuple as _Tuple

import torch as _torch

from . import _api
from .torch import _setup_context_saving  # the dense op's, saving seven tensors here

# The op's options: _api._options' keys less the masks (tensor inputs of the op, after the offsets).
_OPTION_NAMES = ("scale", "softcap", "causal", "window_left", "window_right", "threads", "kernel", "dropout_p",
                 "dropout_seed", "dropout_offset")


def _opts(mask, keep, values) -> dict:
    return dict(zip(_OPTION_NAMES, values), mask=mask, keep=keep)


@_torch.library.custom_op("sdpa::forward_varlen", mutates_args=())
def _forward_op(q: _torch.Tensor, k: _torch.Tensor, v: _torch.Tensor, cu_seqlens_q: _torch.Tensor,
                cu_seqlens_k: _torch.Tensor, mask: _Optional[_torch.Tensor], keep: _Optional[_torch.Tensor],
                scale: _Optional[float], softcap: _Optional[float], causal: str, window_left: int, window_right: int,
                threads: int, kernel: str, dropout_p: float, dropout_seed: int,
                dropout_offset: int) -> _Tuple[_torch.Tensor, _torch.Tensor]:
    """out (Tq, Hq, Dv), lse (Hq, Tq) = sdpa::forward_varlen(q (Tq, Hq, Dk), k, v (Tk, Hkv, Dk|Dv), offsets,
    mask or keep (1, Hq|1, Tq|1, Tk|1))."""
    return _api._forward_varlen("torch", q, k, v, cu_seqlens_q, cu_seqlens_k,
                                _opts(mask, keep, (scale, softcap, causal, window_left, window_right, threads, kernel,
                                                   dropout_p, dropout_seed, dropout_offset)))


@_forward_op.register_fake
def _(q, k, v, cu_seqlens_q, cu_seqlens_k, mask, keep, *options):
    # The same allocation as _api._forward_varlen: fresh C-contiguous buffers.
    Tq, Hq, _ = q.shape
    return q.new_empty((Tq, Hq, v.shape[2])), q.new_empty((Hq, Tq), dtype=_torch.float32)


@_torch.library.custom_op("sdpa::backward_varlen", mutates_args=())
def _backward_op(q: _torch.Tensor, k: _torch.Tensor, v: _torch.Tensor, cu_seqlens_q: _torch.Tensor,
                 cu_seqlens_k: _torch.Tensor, out: _torch.Tensor, lse: _torch.Tensor, dout: _torch.Tensor,
                 mask: _Optional[_torch.Tensor], keep: _Optional[_torch.Tensor], scale: _Optional[float],
                 softcap: _Optional[float], causal: str, window_left: int, window_right: int, threads: int, kernel: str,
                 dropout_p: float, dropout_seed: int,
                 dropout_offset: int) -> _Tuple[_torch.Tensor, _torch.Tensor, _torch.Tensor]:
    """dq, dk, dv = sdpa::backward_varlen(...): contiguous, shaped like q, k, v."""
    return _api._backward_varlen("torch", q, k, v, cu_seqlens_q, cu_seqlens_k, out, lse, dout,
                                 _opts(mask, keep, (scale, softcap, causal, window_left, window_right, threads, kernel,
                                                    dropout_p, dropout_seed, dropout_offset)))


@_backward_op.register_fake
def _(q, k, v, cu_seqlens_q, cu_seqlens_k, out, lse, dout, *options):
    return q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape)


def _backward(ctx, dout, _dlse):
    q, k, v, cu_q, cu_k, mask, keep, out, lse = ctx.saved_tensors
    if dout.dtype != q.dtype:  # e.g. a float32 or float64 loss upstream of a 16-bit out
        dout = dout.to(q.dtype)
    dq, dk, dv = _backward_op(q, k, v, cu_q, cu_k, out, lse, dout, mask, keep, *ctx.options)
    return (dq, dk, dv, None, None, None, None) + (None,) * len(_OPTION_NAMES)


_forward_op.register_autograd(_backward, setup_context=_setup_context_saving(7))


def forward(q, k, v, cu_seqlens_q, cu_seqlens_k, opts: dict):
    """out, lse through the custom op (differentiable in q, k, v); opts as _api._options returns it."""
    return _forward_op(q, k, v, cu_seqlens_q, cu_seqlens_k, opts["mask"], opts["keep"],
                       *(opts[name] for name in _OPTION_NAMES))

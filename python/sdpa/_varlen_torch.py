"""Autograd for sdpa.attention_varlen on PyTorch tensors (imported only when q, k or v requires grad).

Forward and backward are the library's own (sdpa::forward_varlen, sdpa::backward_varlen); the
saved tensors are q, k, v, the offsets, out and lse: nothing of size L x L per sequence.
"""

from __future__ import annotations

import torch as _torch
from torch.autograd.function import once_differentiable as _once_differentiable

from . import _api


class VarlenFunction(_torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, cu_q, cu_k, opts):
        out, lse = _api._forward_varlen("torch", q, k, v, cu_q, cu_k, opts)
        ctx.save_for_backward(q, k, v, cu_q, cu_k, out, lse)
        ctx.opts = opts
        ctx.mark_non_differentiable(lse)
        return out, lse

    @staticmethod
    @_once_differentiable
    def backward(ctx, dout, _dlse):
        q, k, v, cu_q, cu_k, out, lse = ctx.saved_tensors
        if dout.dtype != _torch.float32:  # e.g. a float64 loss upstream
            dout = dout.float()
        dq, dk, dv = _api._backward_varlen("torch", q, k, v, cu_q, cu_k, out, lse, dout, ctx.opts)
        return dq, dk, dv, None, None, None

"""The custom ops sdpa::forward, sdpa::backward, sdpa::forward_varlen and sdpa::backward_varlen, and their
autograd: what a tensor call runs when it needs gradients or when something traces it.

They are torch.library ops, so torch.compile traces through them without a graph break (it sees an opaque
node with a fake implementation giving shapes) and torch.export records them, which any process that has
imported sdpa.torch can run. Each op's arguments are its leading tensors, then the kernel's arguments
(sdpa._core.KERNEL_ARGS, in that order): the schemas are written from that table, and the bodies are
sdpa._core's kernel calls, so the Python checks stay in one place (sdpa._api checks, then calls the op).
Imports sdpa._core only; sdpa._api imports this module when a call first needs it.
"""

from __future__ import annotations

try:
    import torch
except ImportError as _e:  # pragma: no cover - exercised only without torch
    raise ImportError(
        "sdpa.torch needs PyTorch, which is not importable here: install it (a CPU build is enough, e.g. "
        "pip install torch --index-url https://download.pytorch.org/whl/cpu); "
        "sdpa.attention works on NumPy arrays without it"
    ) from _e

from . import _core

_NAMES = _core.KERNEL_ARG_NAMES
# Which of the kernel's arguments are tensors (the masks): saved for the backward with save_for_backward.
_TENSOR_ARGS = tuple(i for i, (_, kind) in enumerate(_core.KERNEL_ARGS) if kind.startswith("Tensor"))
_SCHEMA_ARGS = ", ".join(f"{kind} {name}" for name, kind in _core.KERNEL_ARGS)
_SINKS = _NAMES.index("sinks")  # the one option with a gradient


def _dsinks_like(q, options):
    """The backward's fourth result: dsinks [Hq] float32 with sinks, else an empty [0] (an op returns tensors)."""
    sinks = options[_SINKS]
    return q.new_empty((0,) if sinks is None else (sinks.shape[0],), dtype=torch.float32)


def _dense_fakes(q, k, v, *options):
    # The same allocation as _core._forward4: fresh C-contiguous buffers.
    B, Hq, Nq, _ = q.shape
    return q.new_empty((B, Hq, Nq, v.shape[3])), q.new_empty((B, Hq, Nq), dtype=torch.float32)


def _dense_grad_fakes(q, k, v, out, lse, dout, *options):
    return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v), _dsinks_like(q, options)  # _backward4's


def _varlen_fakes(q, k, v, cu_q, cu_k, *options):
    # The same allocation as _core._forward_varlen: fresh C-contiguous buffers.
    Tq, Hq, _ = q.shape
    return q.new_empty((Tq, Hq, v.shape[2])), q.new_empty((Hq, Tq), dtype=torch.float32)


def _varlen_grad_fakes(q, k, v, cu_q, cu_k, out, lse, dout, *options):
    return q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape), _dsinks_like(q, options)


# The ops, each said once: (name, its leading tensors, the kernel call on them, the fake giving its results'
# shapes). The results: out (.., Dv) and lse for a forward, dq, dk, dv and dsinks (Hq; (0) without sinks) for a
# backward (q (B, Hq, Nq, Dk) dense
# or (Tq, Hq, Dk) packed; k, v (B, Hkv, Nk, D) or (Tk, Hkv, D)). With dropout_p > 0 the mask is a pure function
# of (dropout_seed, dropout_offset) and the position: each op is deterministic in its arguments (the seed is
# drawn before it, by sdpa._core._options) and the backward regenerates the forward's mask.
_OPS = (
    ("forward", ("q", "k", "v"), _core._forward4, _dense_fakes),
    ("backward", ("q", "k", "v", "out", "lse", "dout"), _core._backward4, _dense_grad_fakes),
    ("forward_varlen", ("q", "k", "v", "cu_seqlens_q", "cu_seqlens_k"), _core._forward_varlen, _varlen_fakes),
    ("backward_varlen", ("q", "k", "v", "cu_seqlens_q", "cu_seqlens_k", "out", "lse", "dout"),
     _core._backward_varlen, _varlen_grad_fakes),
)


def _body(kernel_call, n_tensors: int, backward: bool):
    """The op's implementation: its leading tensors and the kernel's arguments, positionally, to the call."""
    def body(*args):
        results = kernel_call("torch", *args[:n_tensors], dict(zip(_NAMES, args[n_tensors:])))
        if backward and results[3] is None:
            return results[:3] + (_dsinks_like(args[0], args[n_tensors:]),)
        return results
    return body


_BODIES = {}
for _name, _tensors, _call, _fake in _OPS:
    _backward = _name.startswith("backward")
    _results = "(Tensor, Tensor, Tensor, Tensor)" if _backward else "(Tensor, Tensor)"
    torch.library.define(f"sdpa::{_name}", f"({', '.join('Tensor ' + t for t in _tensors)}, {_SCHEMA_ARGS}) -> "
                                           f"{_results}")
    _BODIES[_name] = _body(_call, len(_tensors), _backward)
    torch.library.impl(f"sdpa::{_name}", "default", _BODIES[_name])
    torch.library.register_fake(f"sdpa::{_name}", _fake)


def _setup_context(n_tensors: int):
    """The forward ops' setup_context: saves the leading tensors (q, k, v; packed: also the offsets), the mask
    arguments, out and lse; the backward recomputes the probabilities from lse (and the dropout mask from the
    seed and offset among the options), so nothing of size Nq x Nk is kept beyond the caller's own mask. lse is
    an output but not differentiable."""
    def setup_context(ctx, inputs, output):
        options = inputs[n_tensors:]
        ctx.save_for_backward(*inputs[:n_tensors], *(options[i] for i in _TENSOR_ARGS), *output)
        ctx.options = options
        ctx.n_tensors = n_tensors
        ctx.mark_non_differentiable(output[1])
    return setup_context


def _saved(ctx):
    """(leading tensors, out, lse, kernel arguments) as setup_context saved them."""
    saved = ctx.saved_tensors
    n = ctx.n_tensors
    options = list(ctx.options)
    for i, x in zip(_TENSOR_ARGS, saved[n:n + len(_TENSOR_ARGS)]):
        options[i] = x
    return saved[:n], saved[-2], saved[-1], options


def _backward_by(backward_run):
    """The backward of a forward op, given what computes dq, dk, dv (the backward op, or its body)."""
    def backward(ctx, dout, _dlse):
        lead, out, lse, options = _saved(ctx)
        if dout.dtype != lead[0].dtype:  # e.g. a float32 or float64 loss upstream of a 16-bit out
            dout = dout.to(lead[0].dtype)
        dq, dk, dv, dsinks = backward_run(*lead, out, lse, dout, *options)
        option_grads = [None] * len(options)
        if options[_SINKS] is not None:
            option_grads[_SINKS] = dsinks
        return (dq, dk, dv) + (None,) * (len(lead) - 3) + tuple(option_grads)
    return backward


torch.library.register_autograd("sdpa::forward", _backward_by(torch.ops.sdpa.backward.default),
                                setup_context=_setup_context(3))
torch.library.register_autograd("sdpa::forward_varlen", _backward_by(torch.ops.sdpa.backward_varlen.default),
                                setup_context=_setup_context(5))


class EagerAutograd(torch.autograd.Function):
    """sdpa::forward's autograd for an eager call (grad needed, nothing tracing: _core._torch_route): the same
    bodies, saved tensors and backward, without the op's dispatch. That dispatch cost ~200 us of a ~1 ms
    forward + backward at (2, 4, 128, 32) (docs/python.md, "Small calls: where the time goes"): torch.library's
    autograd wrapper reads the op's schema once per argument, and each op call redispatches through Python.
    Traced calls (torch.compile, export, modes, subclasses, functorch) still need the op, which they can record;
    this Function they could not."""

    @staticmethod
    def forward(q, k, v, *options):
        return _BODIES["forward"](q, k, v, *options)

    setup_context = staticmethod(_setup_context(3))

    @staticmethod
    @torch.autograd.function.once_differentiable  # no double backward, as with the op
    def backward(ctx, dout, dlse):
        return _eager_backward(ctx, dout, dlse)


_eager_backward = _backward_by(_BODIES["backward"])


def forward(q, k, v, opts: dict, traced: bool = True):
    """out, lse differentiable in q, k, v; opts as _core._options returns it. traced: through the custom op
    (anything that traces or wraps the call needs it), else through EagerAutograd."""
    run = torch.ops.sdpa.forward.default if traced else EagerAutograd.apply
    return run(q, k, v, *(opts[name] for name in _NAMES))


def forward_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, opts: dict):
    """out, lse of a packed batch through the custom op (differentiable in q, k, v)."""
    return torch.ops.sdpa.forward_varlen.default(q, k, v, cu_seqlens_q, cu_seqlens_k, *(opts[name] for name in _NAMES))

"""Attention sinks from Python: sdpa.attention(..., sinks=...) on NumPy arrays and torch tensors, the gradient
of the sinks (sdpa.attention_backward, and autograd through the custom ops), judged against a NumPy float64
reference that appends each head's sink as a key with no value."""

import math

import numpy as np
import pytest

import sdpa
from npref import assert_within, forward_floors


def sink_ref(q, k, v, sinks, *, dtype=np.float64, causal=None):
    """(out, lse): softmax over [scores | sink_h] per row, the sink's column dropped before P V."""
    q, k, v = (np.asarray(x).astype(dtype) for x in (q, k, v))
    B, Hq, Nq, Dk = q.shape
    g = Hq // k.shape[1]
    kr, vr = np.repeat(k, g, axis=1), np.repeat(v, g, axis=1)
    s = (q @ np.swapaxes(kr, -1, -2)) * dtype(1.0 / math.sqrt(Dk))
    if causal == "top-left":
        s = np.where(np.tril(np.ones(s.shape[-2:], bool)), s, -np.inf)
    sink = np.broadcast_to(np.asarray(sinks, dtype)[None, :, None, None], (B, Hq, Nq, 1))
    full = np.concatenate([s, sink], axis=-1)
    m = full.max(axis=-1, keepdims=True)
    e = np.exp(full - m)
    total = e.sum(axis=-1, keepdims=True)
    out = (e[..., :-1] / total) @ vr
    return out.astype(dtype), (m + np.log(total))[..., 0].astype(dtype)


def _inputs(seed=0, B=2, Hq=4, Hkv=2, N=33, D=16):
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((B, Hq, N, D), dtype=np.float32)
    k = rng.standard_normal((B, Hkv, N, D), dtype=np.float32)
    v = rng.standard_normal((B, Hkv, N, D), dtype=np.float32)
    sinks = np.array([0.5, -1.25, 2.0, -np.inf], np.float32)[:Hq]
    return q, k, v, sinks


def test_numpy_forward_within_the_rule():
    q, k, v, sinks = _inputs()
    out, lse = sdpa.attention(q, k, v, sinks=sinks, causal="top-left", return_lse=True)
    gold, lse_gold = sink_ref(q, k, v, sinks, causal="top-left")
    naive, lse_naive = sink_ref(q, k, v, sinks, dtype=np.float32, causal="top-left")
    f_out, f_lse = forward_floors(q, k, v, lse_gold)
    assert_within("out", out, naive, gold, f_out)
    assert_within("lse", lse, lse_naive, lse_gold, f_lse)
    # the sink of -inf on head 3 is no sink: that head's rows are the plain call's bits
    plain = sdpa.attention(q, k, v, causal="top-left")
    assert np.array_equal(out[:, 3], plain[:, 3]) and not np.array_equal(out[:, 0], plain[:, 0])


def test_sinks_gradient_matches_finite_differences():
    """dsinks from sdpa.attention_backward against a central difference of the float64 reference's loss
    L = Σ dout·out, step 2^-10 (exact in float32); the difference's own error is O(step²)."""
    q, k, v, sinks = _inputs(1)
    dout = np.random.default_rng(9).standard_normal(q.shape, dtype=np.float32)
    out, lse = sdpa.attention(q, k, v, sinks=sinks, return_lse=True)
    dq, dk, dv, dsinks = sdpa.attention_backward(q, k, v, out, lse, dout, sinks=sinks)
    assert dsinks.shape == (4,) and dsinks.dtype == np.float32 and dsinks[3] == 0.0
    assert dq.shape == q.shape and dk.shape == k.shape and dv.shape == v.shape
    step = 2.0 ** -10
    for h in range(3):
        up, down = sinks.copy(), sinks.copy()
        up[h] += step
        down[h] -= step
        loss = [float((sink_ref(q, k, v, s)[0] * dout).sum()) for s in (up, down)]
        fd = (loss[0] - loss[1]) / (2 * step)
        assert abs(dsinks[h] - fd) <= 1e-4 * (1 + abs(fd)), (h, dsinks[h], fd)


def test_errors_name_the_argument():
    q, k, v, sinks = _inputs()
    with pytest.raises(TypeError, match="^sinks: dtype float64 is not supported"):
        sdpa.attention(q, k, v, sinks=sinks.astype(np.float64))
    with pytest.raises(ValueError, match=r"^sinks: shape \[3\] should be \[Hq\] = \[4\]"):
        sdpa.attention(q, k, v, sinks=sinks[:3])
    with pytest.raises(ValueError, match="^sinks: rank 2"):
        sdpa.attention(q, k, v, sinks=sinks[None])
    with pytest.raises(ValueError, match="^sinks: head 1 is nan"):
        sdpa.attention(q, k, v, sinks=np.array([0, np.nan, 0, 0], np.float32))


def test_torch_autograd_reaches_the_sinks():
    """With tensors, sinks that require grad get their gradient through the custom ops (eager and traced routes
    alike, and torch.compile(fullgraph=True)): the bits of sdpa.attention_backward's dsinks."""
    torch = pytest.importorskip("torch")
    qn, kn, vn, sn = _inputs(2)
    q, k, v = (torch.from_numpy(x).requires_grad_(True) for x in (qn, kn, vn))
    sinks = torch.from_numpy(sn).requires_grad_(True)
    dout = torch.randn(q.shape, generator=torch.Generator().manual_seed(3))
    out, lse = sdpa.attention(q, k, v, sinks=sinks, causal="top-left", return_lse=True)
    out.backward(dout)
    _, _, _, dsinks = sdpa.attention_backward(qn, kn, vn, out.detach().numpy(), lse.detach().numpy(), dout.numpy(),
                                              sinks=sn, causal="top-left")
    assert np.array_equal(sinks.grad.numpy(), dsinks)
    for x in (q, k, v, sinks):
        x.grad = None

    @torch.compile(fullgraph=True, backend="aot_eager")
    def loss(q, k, v, sinks):
        return (sdpa.attention(q, k, v, sinks=sinks, causal="top-left") * dout).sum()

    loss(q, k, v, sinks).backward()
    assert np.array_equal(sinks.grad.numpy(), dsinks)


def test_torch_opcheck_with_sinks():
    torch = pytest.importorskip("torch")
    import sdpa.torch  # noqa: F401  (registers the ops)
    from sdpa import _core
    qn, kn, vn, sn = _inputs(4, N=9)
    q, k, v = (torch.from_numpy(x) for x in (qn, kn, vn))
    sinks = torch.from_numpy(sn)
    opts = _core._options({"sinks": sinks}, kind="torch")
    args = (q.requires_grad_(True), k.requires_grad_(True), v.requires_grad_(True),
            *(opts[name] for name in _core.KERNEL_ARG_NAMES))
    torch.library.opcheck(torch.ops.sdpa.forward.default, args)
    out, lse = torch.ops.sdpa.forward(*args)
    dout = torch.randn(out.shape, generator=torch.Generator().manual_seed(5))
    bargs = (q.detach(), k.detach(), v.detach(), out.detach(), lse, dout, *(opts[n] for n in _core.KERNEL_ARG_NAMES))
    torch.library.opcheck(torch.ops.sdpa.backward.default, bargs)
    assert torch.ops.sdpa.backward(*bargs)[3].shape == (4,)

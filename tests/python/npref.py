"""Attention written out in NumPy, and the project's rule for judging an fp32 result.

attention_ref(..., dtype=np.float64) is the oracle: softmax(beta * q k^T + mask) v with every
operation in float64. The same code with dtype=np.float32 is the *naive* fp32 implementation
(materialised scores, fp32 BLAS products, fp32 exp): its error against the oracle is the noise
an ordinary fp32 implementation makes on these very inputs.

The rule (docs/contract.md, src/common/tolerance.hpp): sdpa's fp32 error against the oracle is
at most twice the naive fp32 error plus a floor, the error no fp32 kernel can avoid, derived from
the inputs: rounding each score once perturbs every p_ij by a relative eps * smax, where
smax >= max |s_ij| = |beta| max|q_i| max|k_j| (Cauchy-Schwarz, capped by the soft-cap, plus
max |mask|); the backward's dP - delta cancels terms of size max|dout_i| max|v_j|.
"""

from __future__ import annotations

import math

import numpy as np

EPS32 = 2.0 ** -24  # unit roundoff of float32


def _visible(Nq, Nk, causal, window):
    i = np.arange(Nq)[:, None]
    j = np.arange(Nk)[None, :]
    vis = np.ones((Nq, Nk), dtype=bool)
    if causal == "top-left":
        vis &= j <= i
    elif causal == "bottom-right":
        vis &= j <= i + Nk - Nq
    if window is not None:
        left, right = (-1 if w is None else w for w in window)
        d = i if causal == "top-left" else i + Nk - Nq
        if left >= 0:
            vis &= j >= d - left
        if right >= 0:
            vis &= j <= d + right
    return vis


def _mask4(mask):
    m = np.asarray(mask)
    return m.reshape((1,) * (4 - m.ndim) + m.shape)


def attention_ref(q, k, v, *, dtype=np.float64, scale=None, causal=None, window=None, softcap=None, mask=None,
                  dropout=None, sinks=None):
    """(out, lse, cache) for [B, H, N, D] inputs; cache feeds backward_ref. dropout: the multipliers
    M [B, Hq, Nq, Nk] (keep / (1 - p), else 0) applied to the probabilities before P V; lse stays the
    undropped one. sinks [Hq]: each head's logit joins its rows' softmax as a key with no value
    (never dropped); sink_grad_ref gives its gradient."""
    q, k, v = (np.asarray(x).astype(dtype) for x in (q, k, v))
    B, Hq, Nq, Dk = q.shape
    Hkv, Nk = k.shape[1], k.shape[2]
    g = Hq // Hkv
    kr, vr = np.repeat(k, g, axis=1), np.repeat(v, g, axis=1)
    beta = dtype(1.0 / math.sqrt(Dk) if scale is None else scale)
    x = q @ np.swapaxes(kr, -1, -2)
    s = x * beta
    t = None
    if softcap is not None:
        c = dtype(softcap)
        t = np.tanh(s / c)
        s = c * t
    vis = np.broadcast_to(_visible(Nq, Nk, causal, window), (B, Hq, Nq, Nk))
    if mask is not None:
        m = _mask4(mask)
        if m.dtype == np.bool_:
            vis = vis & m
        else:
            m = m.astype(dtype)
            vis = vis & (m != -np.inf)
            s = s + np.where(np.isfinite(m), m, 0).astype(dtype)
    s = np.where(vis, s, -np.inf).astype(dtype)
    mx = s.max(axis=-1, keepdims=True)
    if sinks is not None:
        sink = np.broadcast_to(np.asarray(sinks).astype(dtype)[None, :, None, None], mx.shape)
        mx = np.maximum(mx, sink)
    empty = mx == -np.inf
    e = np.where(vis, np.exp(s - np.where(empty, 0, mx)), 0).astype(dtype)
    den = e.sum(axis=-1, keepdims=True)
    e_sink = None
    if sinks is not None:
        e_sink = np.where(empty, 0, np.exp(sink - np.where(empty, 0, mx))).astype(dtype)
        den = den + e_sink
    p = np.where(empty, 0, e / np.where(empty, 1, den)).astype(dtype)
    m = None if dropout is None else np.asarray(dropout).astype(dtype)
    out = ((p if m is None else p * m) @ vr).astype(dtype)
    lse = np.where(empty, -np.inf, mx + np.log(np.where(empty, 1, den)))[..., 0].astype(dtype)
    p_sink = None if e_sink is None else np.where(empty, 0, e_sink / np.where(empty, 1, den)).astype(dtype)
    cache = dict(q=q, kr=kr, vr=vr, p=p, m=m, beta=beta, t=t, g=g, out=out, dtype=dtype, p_sink=p_sink)
    return out, lse, cache


def sink_grad_ref(cache, dout):
    """dL/dsinks [Hq] = -sum over the head's rows of p_sink * (dout . out), in the cache's dtype."""
    dt = cache["dtype"]
    delta = (np.asarray(dout).astype(dt) * cache["out"]).sum(axis=-1)
    return -(cache["p_sink"][..., 0] * delta).sum(axis=(0, 2)).astype(dt)


def sink_grad_floor(out_gold, lse_gold, dout, sinks, err_out, err_lse):
    """The floor of dL/dsinks (tolerance.hpp's sink_grad_floor): out off by err_out an element moves
    delta = dout . out by |dout|_1 err_out, lse off by err_lse moves p_sink by a relative err_lse."""
    out_gold, dout = np.asarray(out_gold, np.float64), np.asarray(dout, np.float64)
    p_sink = np.exp(np.asarray(sinks, np.float64)[None, :, None] - np.asarray(lse_gold, np.float64))
    delta = (dout * out_gold).sum(axis=-1)
    return float((p_sink * (np.abs(dout).sum(axis=-1) * err_out + np.abs(delta) * err_lse)).sum(axis=(0, 2)).max())


def backward_ref(cache, dout):
    """(dq, dk, dv) from attention_ref's cache, in the cache's dtype."""
    dt = cache["dtype"]
    dout = np.asarray(dout).astype(dt)
    p, kr, vr, q, out, beta = cache["p"], cache["kr"], cache["vr"], cache["q"], cache["out"], cache["beta"]
    m = cache["m"]
    dP = dout @ np.swapaxes(vr, -1, -2)
    if m is not None:  # out = (P∘M) V: dP is seen through the mask, and dV takes P∘M
        dP = dP * m
    delta = (dout * out).sum(axis=-1, keepdims=True)
    dS = p * (dP - delta)
    if cache["t"] is not None:
        dS = dS * (1 - cache["t"] ** 2)
    dX = (beta * dS).astype(dt)
    dq = dX @ kr
    dk_rep = np.swapaxes(dX, -1, -2) @ q
    dv_rep = np.swapaxes(p if m is None else p * m, -1, -2) @ dout
    B, Hq = q.shape[:2]
    g = cache["g"]

    def fold(a):  # sum over the query heads of each kv head's group
        return a.reshape(B, Hq // g, g, *a.shape[2:]).sum(axis=2)

    return dq.astype(dt), fold(dk_rep).astype(dt), fold(dv_rep).astype(dt)


def max_row_norm(x):
    x = np.asarray(x, dtype=np.float64)
    return float(np.sqrt((x * x).sum(axis=-1)).max())


def max_abs(x):
    x = np.asarray(x, dtype=np.float64)
    f = x[np.isfinite(x)]
    return float(np.abs(f).max()) if f.size else 0.0


def smax(q, k, *, scale=None, softcap=None, mask=None):
    Dk = np.shape(q)[-1]
    beta = abs(1.0 / math.sqrt(Dk) if scale is None else scale)
    s = beta * max_row_norm(q) * max_row_norm(k)
    if softcap is not None:
        s = min(s, softcap)
    if mask is not None and np.asarray(mask).dtype != np.bool_:
        s += max_abs(mask)
    return s


def forward_floors(q, k, v, lse_gold, **opts):
    """Floors for out and lse (tolerance.hpp: 8 roundings' worth)."""
    sm = smax(q, k, scale=opts.get("scale"), softcap=opts.get("softcap"), mask=opts.get("mask"))
    return 8 * EPS32 * max_abs(v) * (1 + sm), 8 * EPS32 * (max_abs(lse_gold) + sm)


def backward_floors(q, k, v, dout, dv_gold, **opts):
    """Floors for dq, dk, dv."""
    Dk = np.shape(q)[-1]
    scale = opts.get("scale")
    beta = abs(1.0 / math.sqrt(Dk) if scale is None else scale)
    sm = smax(q, k, scale=scale, softcap=opts.get("softcap"), mask=opts.get("mask"))
    dpmax = max_row_norm(dout) * max_row_norm(v)
    c = 8 * EPS32 * (1 + sm)
    return c * beta * dpmax * max_abs(k), c * beta * dpmax * max_abs(q), c * max_abs(dv_gold)


def max_err(a, gold):
    """max |a - gold| over finite entries; a NaN or infinity must match in kind (else inf)."""
    a = np.asarray(a, dtype=np.float64)
    gold = np.asarray(gold, dtype=np.float64)
    assert a.shape == gold.shape, (a.shape, gold.shape)
    if not np.array_equal(np.isnan(a), np.isnan(gold)):
        return math.inf
    inf_a, inf_g = np.isinf(a), np.isinf(gold)
    if not np.array_equal(inf_a, inf_g) or not np.array_equal(a[inf_a], gold[inf_g]):
        return math.inf
    fin = np.isfinite(gold)
    return float(np.abs(a[fin] - gold[fin]).max()) if fin.any() else 0.0


def assert_within(what, fast, naive, gold, floor):
    """The rule: err(fast) <= 2 err(naive) + floor."""
    ef, en = max_err(fast, gold), max_err(naive, gold)
    bound = 2 * en + floor
    assert ef <= bound, f"{what}: sdpa error {ef:.3g} > bound {bound:.3g} (naive fp32 error {en:.3g}, floor {floor:.3g})"
    return ef, en, bound


def merge_extra(q, k, v, dout, p, parts, lse_floor, **opts):
    """The extra error of a result merged by lse from `parts` key blocks per row, for
    (out, lse, dq, dk, dv): docs/scaling.md, "The merge's error bound" (tests/distributed/merge_tolerance.hpp
    is the same bound for the C++ tests). p: the fp64 probabilities [B, Hq, Nq, Nk]. With sinks the
    sink is one more part, its lse the sink's logit."""
    Dk, Nk = np.shape(q)[-1], np.shape(k)[-2]
    scale = opts.get("scale")
    beta = abs(1.0 / math.sqrt(Dk) if scale is None else scale)
    sm = smax(q, k, scale=scale, softcap=opts.get("softcap"))
    L = sm + math.log(Nk)
    if opts.get("sinks") is not None:
        L = max(sm, max_abs(opts["sinks"])) + math.log(Nk + 1)
        parts += 1
    dpmax = max_row_norm(dout) * max_row_norm(v)
    Hq, Hkv = np.shape(q)[1], np.shape(k)[1]
    B, _, Nq, _ = np.shape(p)
    mass = float(np.asarray(p).reshape(B, Hkv, Hq // Hkv, Nq, Nk).sum(axis=(2, 3)).max())  # max_j Σ_i p_ij
    s1 = (parts - 1) * EPS32
    vmax = max_abs(v)
    return (2 * lse_floor * vmax + s1 * vmax * (4 * L + 20), s1 * (L + 4), s1 * (L + 5) * 2 * beta * dpmax * max_abs(k),
            s1 * (L + 5) * 2 * beta * dpmax * max_abs(q) * mass, s1 * (L + 5) * max_abs(dout) * mass)

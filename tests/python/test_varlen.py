"""sdpa.attention_varlen (packed sequences of different lengths) against the float64 NumPy oracle
run on each sequence alone, under the project's rule (npref.py); errors naming the argument;
autograd on torch tensors."""

import re

import numpy as np
import pytest

import sdpa
from npref import assert_within, attention_ref, backward_ref, backward_floors, forward_floors

LQ = [5, 0, 40, 1, 23]
LK = [7, 3, 40, 0, 60]
HQ, HKV, DK, DV = 4, 2, 16, 8


def packed(seed, dtype=np.int32):
    rng = np.random.default_rng(seed)
    Tq, Tk = sum(LQ), sum(LK)
    q = rng.standard_normal((Tq, HQ, DK)).astype(np.float32)
    k = rng.standard_normal((Tk, HKV, DK)).astype(np.float32)
    v = rng.standard_normal((Tk, HKV, DV)).astype(np.float32)
    dout = rng.standard_normal((Tq, HQ, DV)).astype(np.float32)
    cq = np.concatenate([[0], np.cumsum(LQ)]).astype(dtype)
    ck = np.concatenate([[0], np.cumsum(LK)]).astype(dtype)
    return q, k, v, dout, cq, ck


def per_sequence(q, k, v, dout, cq, ck, dtype, **opts):
    """out, lse, dq, dk, dv of the NumPy reference in `dtype`, one (1, H, L, D) call per sequence."""
    out = np.zeros((q.shape[0], HQ, DV), dtype)
    lse = np.full((HQ, q.shape[0]), -np.inf, dtype)
    dq, dk, dv = np.zeros(q.shape, dtype), np.zeros(k.shape, dtype), np.zeros(v.shape, dtype)
    for s in range(len(cq) - 1):
        qs, ks = slice(cq[s], cq[s + 1]), slice(ck[s], ck[s + 1])
        if cq[s] == cq[s + 1] or ck[s] == ck[s + 1]:
            continue
        as4 = lambda x: x.transpose(1, 0, 2)[None]  # (L, H, D) -> (1, H, L, D)
        o, l, cache = attention_ref(as4(q[qs]), as4(k[ks]), as4(v[ks]), dtype=dtype, **opts)
        gq, gk, gv = backward_ref(cache, as4(dout[qs]).astype(dtype))
        out[qs], lse[:, qs] = o[0].transpose(1, 0, 2), l[0]
        dq[qs], dk[ks], dv[ks] = gq[0].transpose(1, 0, 2), gk[0].transpose(1, 0, 2), gv[0].transpose(1, 0, 2)
    return out, lse, dq, dk, dv


CASES = [dict(), dict(causal="top-left"), dict(causal="bottom-right", window=(6, 2)), dict(softcap=2.0, scale=0.8)]


@pytest.mark.parametrize("opts", CASES, ids=lambda c: ",".join(f"{k}={v}" for k, v in c.items()) or "plain")
def test_forward_and_backward_match_the_oracle_per_sequence(opts):
    q, k, v, dout, cq, ck = packed(1)
    gold = per_sequence(q, k, v, dout, cq, ck, np.float64, **opts)
    naive = per_sequence(q, k, v, dout, cq, ck, np.float32, **opts)
    out, lse = sdpa.attention_varlen(q, k, v, cq, ck, return_lse=True, **opts)
    assert out.shape == (q.shape[0], HQ, DV) and lse.shape == (HQ, q.shape[0])
    as4 = lambda x: x.transpose(1, 0, 2)[None]
    f_out, f_lse = forward_floors(as4(q), as4(k), as4(v), gold[1], **opts)
    assert_within("out", out, naive[0], gold[0], f_out)
    assert_within("lse", lse, naive[1], gold[1], f_lse)
    assert np.all(out[sum(LQ[:3]):sum(LQ[:4])] == 0) and np.all(lse[:, sum(LQ[:3])] == -np.inf)  # no keys


def test_torch_autograd_matches_the_oracle():
    torch = pytest.importorskip("torch")
    q, k, v, dout, cq, ck = packed(2, np.int64)
    opts = dict(causal="bottom-right")
    gold = per_sequence(q, k, v, dout, cq, ck, np.float64, **opts)
    naive = per_sequence(q, k, v, dout, cq, ck, np.float32, **opts)
    tq, tk, tv = (torch.tensor(x, requires_grad=True) for x in (q, k, v))
    out = sdpa.attention_varlen(tq, tk, tv, torch.tensor(cq), torch.tensor(ck), **opts)
    assert isinstance(out, torch.Tensor) and out.requires_grad
    out.backward(torch.tensor(dout))
    as4 = lambda x: x.transpose(1, 0, 2)[None]
    f_dq, f_dk, f_dv = backward_floors(as4(q), as4(k), as4(v), as4(dout), as4(gold[4]), **opts)
    assert_within("dq", tq.grad.numpy(), naive[2], gold[2], f_dq)
    assert_within("dk", tk.grad.numpy(), naive[3], gold[3], f_dk)
    assert_within("dv", tv.grad.numpy(), naive[4], gold[4], f_dv)


def test_int32_and_int64_offsets_agree():
    q, k, v, _, cq, ck = packed(3)
    a = sdpa.attention_varlen(q, k, v, cq, ck, causal="top-left")
    b = sdpa.attention_varlen(q, k, v, cq.astype(np.int64), ck.astype(np.int64), causal="top-left")
    assert np.array_equal(a, b)


def test_bad_arguments_name_themselves():
    q, k, v, _, cq, ck = packed(4)
    with pytest.raises(TypeError, match="cu_seqlens_q: dtype float32"):
        sdpa.attention_varlen(q, k, v, cq.astype(np.float32), ck)
    with pytest.raises(TypeError, match="cu_seqlens_k: dtype int64 differs"):
        sdpa.attention_varlen(q, k, v, cq, ck.astype(np.int64))
    bad = cq.copy()
    bad[2], bad[3] = bad[3], bad[2]  # [0, 5, 45, 5, ...]
    with pytest.raises(sdpa.Error, match="cu_seqlens_q: offsets must not decrease"):
        sdpa.attention_varlen(q, k, v, bad, ck)
    with pytest.raises(sdpa.Error, match="cu_seqlens_k: must end at k's"):
        sdpa.attention_varlen(q, k, v, cq, np.append(ck[:-1], ck[-1] + 1).astype(np.int32))
    with pytest.raises(ValueError, match="packed sequences are \\[T, H, D\\]"):
        sdpa.attention_varlen(q[None], k[None], v[None], cq, ck)
    with pytest.raises(ValueError, match="cu_seqlens_q: rank 2"):
        sdpa.attention_varlen(q, k, v, cq[None], ck)


def padded(x, c, L):
    """Packed rows (T, H, D) -> (batch, H, L, D), zero past each sequence's length."""
    out = np.zeros((len(c) - 1, x.shape[1], L, x.shape[2]), np.float32)
    for s in range(len(c) - 1):
        out[s, :, :c[s + 1] - c[s]] = x[c[s]:c[s + 1]].transpose(1, 0, 2)
    return out


def test_dropout_packed_is_the_padded_batch():
    """Sequence s draws the mask batch s draws in the padded (batch, H, L, D) call with the same seed and
    offset (the padding keys masked): the packed and the padded results agree within the fp32 floor of the
    dropped weights, 8 eps (1 + smax) max|v| / (1 - p), forward and, with the same mask regenerated, backward
    (through torch autograd; the gradients' floors scaled alike)."""
    torch = pytest.importorskip("torch")
    p, seed, offset = 0.3, 1234, 5
    q, k, v, dout, cq, ck = packed(5)
    Lq, Lk = max(LQ), max(LK)
    keep = np.zeros((len(LQ), 1, 1, Lk), bool)
    for s, n in enumerate(LK):
        keep[s, ..., :n] = True
    tq, tk, tv = (torch.tensor(x, requires_grad=True) for x in (q, k, v))
    out = sdpa.attention_varlen(tq, tk, tv, torch.tensor(cq), torch.tensor(ck), dropout_p=p, dropout_seed=seed,
                                dropout_offset=offset)
    out.backward(torch.tensor(dout))
    pq, pk, pv, pdo = (torch.tensor(padded(x, c, L), requires_grad=x is not dout)
                       for x, c, L in ((q, cq, Lq), (k, ck, Lk), (v, ck, Lk), (dout, cq, Lq)))
    pout = sdpa.attention(pq, pk, pv, mask=torch.tensor(keep), dropout_p=p, dropout_seed=seed, dropout_offset=offset)
    pout.backward(pdo)
    as4 = lambda x: x.transpose(1, 0, 2)[None]
    f_out = forward_floors(as4(q), as4(k), as4(v), np.zeros(1))[0] / (1 - p)
    dv_scale = as4(tv.grad.numpy())  # max|dv| sets dv's floor (tolerance.hpp); it holds the 1/(1 - p) already
    f_dq, f_dk = (f / (1 - p) for f in backward_floors(as4(q), as4(k), as4(v), as4(dout), dv_scale)[:2])
    f_dv = backward_floors(as4(q), as4(k), as4(v), as4(dout), dv_scale)[2]
    assert np.abs(out.detach().numpy() - padded_back(pout.detach().numpy(), cq)).max() <= f_out
    assert np.abs(tq.grad.numpy() - padded_back(pq.grad.numpy(), cq)).max() <= f_dq
    assert np.abs(tk.grad.numpy() - padded_back(pk.grad.numpy(), ck)).max() <= f_dk
    assert np.abs(tv.grad.numpy() - padded_back(pv.grad.numpy(), ck)).max() <= f_dv
    plain = sdpa.attention_varlen(q, k, v, cq, ck)
    assert np.abs(plain - out.detach().numpy()).max() > 0.05, "dropout_p had no effect"


def padded_back(x, c):
    """(batch, H, L, D) -> packed rows (T, H, D)."""
    return np.concatenate([x[s, :, :c[s + 1] - c[s]].transpose(1, 0, 2) for s in range(len(c) - 1)])


@pytest.mark.parametrize("dropout_p", [0.0, 0.3])
def test_custom_ops_opcheck(dropout_p):
    """sdpa::forward_varlen / sdpa::backward_varlen are well-formed custom ops: schema, fake (meta)
    implementations, autograd registration, AOT dispatch (torch.library.opcheck); the drop-in calls them."""
    torch = pytest.importorskip("torch")
    q, k, v, dout, cq, ck = packed(6, np.int64)
    tq, tk, tv = (torch.tensor(x, requires_grad=True) for x in (q, k, v))
    tcq, tck = torch.tensor(cq), torch.tensor(ck)
    out = sdpa.attention_varlen(tq, tk, tv, tcq, tck, causal="bottom-right", dropout_p=dropout_p, dropout_seed=9)
    assert out.grad_fn is not None  # differentiable through the op's autograd registration
    from sdpa import _core
    keep = torch.tensor(np.random.default_rng(7).random((1, 1, 1, k.shape[0])) < 0.8).view(torch.uint8)  # (1, 1, 1, Tk)
    for keep_arg in (None, keep):  # the op's keep input: none, and a packed keep-mask
        kernel_args = {**_core._options({"causal": "bottom-right", "dropout_p": dropout_p, "dropout_seed": 9}),
                       "keep": keep_arg}
        opts = tuple(kernel_args[name] for name in _core.KERNEL_ARG_NAMES)  # the op's trailing arguments
        torch.library.opcheck(torch.ops.sdpa.forward_varlen.default, (tq, tk, tv, tcq, tck) + opts)
        with torch.no_grad():
            o, lse = torch.ops.sdpa.forward_varlen(tq, tk, tv, tcq, tck, *opts)
        if keep_arg is None:
            assert torch.equal(o, out.detach())
        torch.library.opcheck(torch.ops.sdpa.backward_varlen.default,
                              (tq.detach(), tk.detach(), tv.detach(), tcq, tck, o, lse, torch.tensor(dout)) + opts)


# ---- explicit masks on a packed batch ------------------------------------------------------------

def packed_masks(seed):
    """The packed batch's mask forms, rank 3 broadcast to [Hq, Tq, Tk]: a key-padding keep-mask [1, 1, Tk], an
    additive [1, Tq, Tk] (a tenth -inf), a keep-mask with heads [Hq, Tq, Tk], an additive with heads. The entries
    of the full additive masks outside every sequence's block are NaN: a wrong cut reads one."""
    rng = np.random.default_rng(seed)
    Tq, Tk = sum(LQ), sum(LK)
    cq, ck = np.concatenate([[0], np.cumsum(LQ)]), np.concatenate([[0], np.cumsum(LK)])
    inside = np.zeros((Tq, Tk), bool)
    for s in range(len(LQ)):
        inside[cq[s]:cq[s + 1], ck[s]:ck[s + 1]] = True

    def additive(h):
        m = rng.standard_normal((h, Tq, Tk)).astype(np.float32)
        m[rng.random(m.shape) < 0.1] = -np.inf
        m[:, ~inside] = np.nan
        return m

    return {"keep_per_key": rng.random((1, 1, Tk)) < 0.75, "additive_per_query_and_key": additive(1),
            "keep_with_heads": rng.random((HQ, Tq, Tk)) < 0.75, "additive_with_heads": additive(HQ)}


def block(m, qs, ks):
    """Sequence rows qs, columns ks of a packed mask; a broadcast (size-1) dimension stays."""
    return m[:, qs if m.shape[1] > 1 else slice(None), ks if m.shape[2] > 1 else slice(None)]


@pytest.mark.parametrize("causal", [None, "bottom-right"])
@pytest.mark.parametrize("form", ["keep_per_key", "additive_per_query_and_key", "keep_with_heads",
                                  "additive_with_heads"])
def test_masks_are_the_dense_call_on_each_sequence(form, causal):
    """NumPy: the packed call with a mask gives the same bits as sdpa.attention on each sequence alone ([H, L, D]
    views of its rows) with its own block of the mask: both are the same fixed-length kernel, and its bits do not
    depend on the thread count; a sequence without keys gets out 0, lse -inf."""
    q, k, v, _, cq, ck = packed(7)
    mask = packed_masks(8)[form]
    out, lse = sdpa.attention_varlen(q, k, v, cq, ck, mask=mask, causal=causal, return_lse=True)
    heads = lambda x: x.transpose(1, 0, 2)  # (L, H, D) -> (H, L, D), a view
    for s in range(len(LQ)):
        qs, ks = slice(cq[s], cq[s + 1]), slice(ck[s], ck[s + 1])
        if cq[s] == cq[s + 1]:
            continue
        if ck[s] == ck[s + 1]:
            assert np.all(out[qs] == 0) and np.all(lse[:, qs] == -np.inf)
            continue
        o, l = sdpa.attention(heads(q[qs]), heads(k[ks]), heads(v[ks]), mask=block(mask, qs, ks), causal=causal,
                              return_lse=True)
        assert np.array_equal(out[qs], heads(o)), f"sequence {s}: out"
        assert np.array_equal(lse[:, qs], l), f"sequence {s}: lse"
    assert not np.isnan(out).any()


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_torch_masks_autograd_is_the_dense_call_on_each_sequence(dtype):
    """torch: out and the gradients in q, k, v of the packed call with a mask (bool with heads, float per query
    and key, with GQA and a causal mask) are bit for bit those of torch autograd through sdpa.attention on each
    sequence's rows and mask block; no gradient flows to the mask."""
    torch = pytest.importorskip("torch")
    dt = getattr(torch, dtype)
    q, k, v, dout, cq, ck = packed(9, np.int64)
    masks = packed_masks(10)
    for form in ("keep_with_heads", "additive_per_query_and_key"):
        mask = torch.tensor(masks[form])
        tq, tk, tv = (torch.tensor(x).to(dt).requires_grad_() for x in (q, k, v))
        tdout = torch.tensor(dout).to(dt)
        out = sdpa.attention_varlen(tq, tk, tv, torch.tensor(cq), torch.tensor(ck), mask=mask, causal="top-left")
        out.backward(tdout)
        heads = lambda x: x.transpose(0, 1)
        for s in range(len(LQ)):
            qs, ks = slice(int(cq[s]), int(cq[s + 1])), slice(int(ck[s]), int(ck[s + 1]))
            if qs.start == qs.stop or ks.start == ks.stop:
                continue
            sq, sk, sv = (x.detach()[r].clone().requires_grad_() for x, r in ((tq, qs), (tk, ks), (tv, ks)))
            o = sdpa.attention(heads(sq), heads(sk), heads(sv), mask=block(mask, qs, ks), causal="top-left")
            o.backward(heads(tdout[qs]))
            assert torch.equal(out.detach()[qs], heads(o.detach())), f"{form}, sequence {s}: out"
            assert torch.equal(tq.grad[qs], sq.grad), f"{form}, sequence {s}: dq"
            assert torch.equal(tk.grad[ks], sk.grad), f"{form}, sequence {s}: dk"
            assert torch.equal(tv.grad[ks], sv.grad), f"{form}, sequence {s}: dv"


def test_bad_masks_name_themselves():
    q, k, v, _, cq, ck = packed(11)
    Tq, Tk = q.shape[0], k.shape[0]
    with pytest.raises(ValueError, match=re.escape(f"mask: shape (1, 1, {Tq}, {Tk}) has rank 4; packed sequences take a rank-3")):
        sdpa.attention_varlen(q, k, v, cq, ck, mask=np.zeros((1, 1, Tq, Tk), np.float32))
    with pytest.raises(sdpa.Error, match=re.escape(f"mask: shape [1, 1, {Tq}, {Tk - 1}] does not broadcast to the packed")):
        sdpa.attention_varlen(q, k, v, cq, ck, mask=np.zeros((1, Tq, Tk - 1), np.float32))
    with pytest.raises(sdpa.Error, match=re.escape(f"keep: shape [1, 2, 1, {Tk}] does not broadcast")):
        sdpa.attention_varlen(q, k, v, cq, ck, mask=np.ones((2, 1, Tk), bool))
    with pytest.raises(TypeError, match="mask: dtype int32"):
        sdpa.attention_varlen(q, k, v, cq, ck, mask=np.zeros((1, 1, Tk), np.int32))
    torch = pytest.importorskip("torch")
    tq, tk, tv, tcq, tck = (torch.tensor(x) for x in (q, k, v, cq, ck))
    with pytest.raises(TypeError, match="mask: not the same kind of array as q"):
        sdpa.attention_varlen(tq, tk, tv, tcq, tck, mask=np.ones((1, 1, Tk), bool))
    with pytest.raises(ValueError, match="mask: requires grad"):
        sdpa.attention_varlen(tq, tk, tv, tcq, tck, mask=torch.zeros((1, 1, Tk), requires_grad=True))


def test_inference_calls_skip_the_varlen_custom_op_with_the_same_bits():
    """As the dense call (test_torch_ops.py): without autograd the extension is called directly, with grad the
    custom op runs; the same kernel call either way, so the same bits."""
    import unittest.mock as mock
    torch = pytest.importorskip("torch")
    import sdpa._ops as ops
    g = torch.Generator().manual_seed(5)
    cu = torch.tensor([0, 3, 10, 16], dtype=torch.int32)
    q, k, v = (torch.randn(16, 4, 8, generator=g), torch.randn(16, 2, 8, generator=g),
               torch.randn(16, 2, 8, generator=g))
    calls = []
    real = ops.forward_varlen

    def counting(*args, **kw):
        calls.append(1)
        return real(*args, **kw)

    with mock.patch.object(ops, "forward_varlen", counting):
        plain = sdpa.attention_varlen(q, k, v, cu, cu, causal="top-left")
        assert calls == []
        graded = sdpa.attention_varlen(q.clone().requires_grad_(True), k, v, cu, cu, causal="top-left")
        assert calls == [1] and graded.requires_grad
    assert torch.equal(plain, graded.detach())

"""sdpa in float16 (NumPy and torch) and bfloat16 (torch): results in the inputs' dtype, judged
by FlashAttention's rule against a float64 torch computation.

The rule (docs/contract.md, "16-bit floats"): the error against float64 is at most twice that of
a naive implementation in the same dtype, plus a floor. Here the naive one is torch's
softmax(q k^T * scale) v with the scores and the softmax in float32 on the 16-bit values, P
rounded to the dtype before P·v (accumulated in float32), the output rounded; its gradients are
torch's autograd through the same steps, whose dtype casts round each backward product's operand
(dP, then dS) to the dtype as a 16-bit backward stores it, and the gradients rounded at the end.
The floor: sdpa rounds each output once, from a float32 result whose own error is far below the
dtype's (fp32 arithmetic, u32 = 2^-24), so it may be off by u·|x| (u = 2^-8 for bfloat16, 2^-11 for
float16) even where the naive error happens to be smaller: floor = u·max|gold|.
No gradcheck: finite differences in 16 bits measure only rounding.
"""

import numpy as np
import pytest

torch = pytest.importorskip(
    "torch", reason="PyTorch is not importable: the bfloat16/float16 torch comparisons are skipped")

import sdpa  # noqa: E402
import sdpa.torch as st  # noqa: E402

UNIT_ROUNDOFF = {torch.bfloat16: 2.0 ** -8, torch.float16: 2.0 ** -11}


def naive(q, k, v, dt, causal, mask):
    """The naive same-dtype implementation on float32 copies of 16-bit values (see the module doc)."""
    s = (q @ k.transpose(-1, -2)) / q.shape[-1] ** 0.5
    if mask is not None:
        s = s + mask.float()
    if causal:
        L, S = s.shape[-2:]
        s = s.masked_fill(torch.ones(L, S, dtype=torch.bool).triu(1), float("-inf"))
    p = s.softmax(-1).to(dt).float()
    return (p @ v).to(dt).float()


def expand_gqa(x, group):
    return x.repeat_interleave(group, dim=-3)


def within(name, ours, naive_x, gold, u):
    err = (ours.double() - gold).abs().max().item()
    err_naive = (naive_x.double() - gold).abs().max().item()
    bound = 2 * err_naive + u * gold.abs().max().item()
    assert err <= bound, f"{name}: error {err:.3g} > bound {bound:.3g} (naive error {err_naive:.3g})"


CASES = [
    dict(name="plain", Hq=2, Hkv=2, L=37, S=53, causal=False, mask=False),
    dict(name="gqa_causal", Hq=4, Hkv=2, L=64, S=64, causal=True, mask=False),
    dict(name="additive_mask", Hq=2, Hkv=1, L=33, S=70, causal=False, mask=True),
    dict(name="decode", Hq=4, Hkv=1, L=1, S=300, causal=False, mask=False),
]


@pytest.mark.parametrize("dt", [torch.bfloat16, torch.float16], ids=["bfloat16", "float16"])
@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_torch_forward_backward_within_the_rule(dt, case):
    g = torch.Generator().manual_seed(len(case["name"]) + (dt == torch.float16))
    B, Hq, Hkv, L, S, E = 2, case["Hq"], case["Hkv"], case["L"], case["S"], 32
    q16, k16, v16, dout16 = (torch.randn(*sh, generator=g).to(dt)
                             for sh in ((B, Hq, L, E), (B, Hkv, S, E), (B, Hkv, S, E), (B, Hq, L, E)))
    mask = (torch.randn(1, 1, L, S, generator=g) * 2).to(dt) if case["mask"] else None
    group = Hq // Hkv
    u = UNIT_ROUNDOFF[dt]

    # sdpa through the torch drop-in: out and the gradients in dt.
    q, k, v = (x.clone().requires_grad_() for x in (q16, k16, v16))
    out = st.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=case["causal"], enable_gqa=group > 1)
    out.backward(dout16)
    assert out.dtype == dt and q.grad.dtype == dt and k.grad.dtype == dt and v.grad.dtype == dt

    # Gold: float64 on the same 16-bit values.
    q64, k64, v64 = (x.double().requires_grad_() for x in (q16, k16, v16))
    gold = torch.nn.functional.scaled_dot_product_attention(
        q64, expand_gqa(k64, group), expand_gqa(v64, group), attn_mask=None if mask is None else mask.double(),
        is_causal=case["causal"])
    gold.backward(dout16.double())

    # Naive: the same dtype's naive implementation (module doc).
    qn, kn, vn = (x.float().requires_grad_() for x in (q16, k16, v16))
    outn = naive(qn, expand_gqa(kn, group), expand_gqa(vn, group), dt, case["causal"], mask)
    outn.backward(dout16.float())

    within("out", out.detach(), outn.detach(), gold.detach(), u)
    for name, ours, nv, gd in (("dq", q.grad, qn.grad.to(dt), q64.grad), ("dk", k.grad, kn.grad.to(dt), k64.grad),
                               ("dv", v.grad, vn.grad.to(dt), v64.grad)):
        within(name, ours, nv.float(), gd, u)


def test_numpy_float16_forward_and_backward():
    rng = np.random.default_rng(3)
    q, k, v, dout = (rng.standard_normal(s).astype(np.float16) for s in ((2, 4, 40, 16), (2, 2, 50, 16),
                                                                         (2, 2, 50, 16), (2, 4, 40, 16)))
    out, lse = sdpa.attention(q, k, v, causal="bottom-right", return_lse=True)
    assert out.dtype == np.float16 and lse.dtype == np.float32
    dq, dk, dv = sdpa.attention_backward(q, k, v, out, lse, dout, causal="bottom-right")
    assert dq.dtype == dk.dtype == dv.dtype == np.float16
    # The same through torch (above, judged by the rule) gives the same bits: one kernel.
    tq, tk, tv = (torch.from_numpy(x).requires_grad_() for x in (q, k, v))
    tout = sdpa.attention(tq, tk, tv, causal="bottom-right")
    tout.backward(torch.from_numpy(dout))
    assert np.array_equal(tout.detach().numpy().view(np.uint16), out.view(np.uint16))
    assert np.array_equal(tq.grad.numpy().view(np.uint16), dq.view(np.uint16))
    assert np.array_equal(tk.grad.numpy().view(np.uint16), dk.view(np.uint16))


def test_mixed_dtypes_are_refused_naming_the_argument():
    q = np.zeros((2, 8, 16), np.float16)
    with pytest.raises(TypeError, match=r"^k: dtype float32 differs from q's float16"):
        sdpa.attention(q, q.astype(np.float32), q)
    tq = torch.zeros(2, 8, 16, dtype=torch.bfloat16)
    with pytest.raises(TypeError, match=r"^value: dtype torch.float16 differs from query's torch.bfloat16"):
        st.scaled_dot_product_attention(tq, tq, tq.half())
    with pytest.raises(TypeError, match=r"^q: dtype torch.float64 is not supported; sdpa takes float32, float16 "
                                        r"or bfloat16"):
        sdpa.attention(tq.double(), tq.double(), tq.double())
    cu = np.array([0, 8], np.int32)
    x16 = np.zeros((8, 2, 16), np.float16)
    with pytest.raises(TypeError, match=r"^v: dtype float32 differs from q's float16"):
        sdpa.attention_varlen(x16, x16, x16.astype(np.float32), cu, cu)
    with pytest.raises(TypeError, match=r"^k: dtype torch.float16 differs from q's torch.bfloat16"):
        sdpa.attention_varlen(tq, tq.half(), tq, torch.tensor(cu), torch.tensor(cu))


# Packed 16-bit batches: each sequence is one call of the fixed-length kernel in the dtype (judged by
# the rule above), so sdpa.attention_varlen must give, bit for bit, sdpa.attention on each sequence
# alone: out, and with torch tensors the gradients through autograd. A sequence without keys gets 0.
VARLEN_LQ, VARLEN_LK = [5, 0, 40, 3, 1], [7, 3, 40, 0, 60]


def per_sequence_dense(q, k, v, dout, cq, ck, causal):
    """out, dq, dk, dv of sdpa.attention called on each sequence's rows as (H, L, D)."""
    out, dq, dk, dv = (torch.zeros_like(x) for x in (dout, q, k, v))
    for s in range(len(cq) - 1):
        qs, ks = slice(cq[s], cq[s + 1]), slice(ck[s], ck[s + 1])
        if cq[s] == cq[s + 1] or ck[s] == ck[s + 1]:
            continue
        qq, kk, vv = (x[r].transpose(0, 1).detach().clone().requires_grad_() for x, r in ((q, qs), (k, ks), (v, ks)))
        o = sdpa.attention(qq, kk, vv, causal=causal)
        o.backward(dout[qs].transpose(0, 1))
        out[qs], dq[qs], dk[ks], dv[ks] = (x.detach().transpose(0, 1) for x in (o, qq.grad, kk.grad, vv.grad))
    return out, dq, dk, dv


@pytest.mark.parametrize("dt", [torch.bfloat16, torch.float16], ids=["bfloat16", "float16"])
def test_torch_varlen_is_the_dense_kernel_per_sequence(dt):
    g = torch.Generator().manual_seed(5)
    Tq, Tk, Hq, Hkv, D = sum(VARLEN_LQ), sum(VARLEN_LK), 4, 2, 16
    q, k, v, dout = (torch.randn(*sh, generator=g).to(dt) for sh in ((Tq, Hq, D), (Tk, Hkv, D), (Tk, Hkv, D), (Tq, Hq, D)))
    cq, ck = (torch.tensor([0] + list(np.cumsum(L)), dtype=torch.int32) for L in (VARLEN_LQ, VARLEN_LK))
    tq, tk, tv = (x.clone().requires_grad_() for x in (q, k, v))
    out, lse = sdpa.attention_varlen(tq, tk, tv, cq, ck, causal="bottom-right", return_lse=True)
    assert out.dtype == dt and lse.dtype == torch.float32
    out.backward(dout)
    assert tq.grad.dtype == tk.grad.dtype == tv.grad.dtype == dt
    want = per_sequence_dense(q, k, v, dout, cq.tolist(), ck.tolist(), "bottom-right")
    for name, ours, theirs in zip(("out", "dq", "dk", "dv"), (out.detach(), tq.grad, tk.grad, tv.grad), want):
        assert torch.equal(ours.view(torch.int16), theirs.contiguous().view(torch.int16)), name


def test_numpy_float16_varlen_is_the_dense_kernel_per_sequence():
    rng = np.random.default_rng(6)
    Tq, Tk = sum(VARLEN_LQ), sum(VARLEN_LK)
    q, k, v = (rng.standard_normal(s).astype(np.float16) for s in ((Tq, 4, 16), (Tk, 2, 16), (Tk, 2, 16)))
    cq, ck = (np.concatenate([[0], np.cumsum(L)]).astype(np.int64) for L in (VARLEN_LQ, VARLEN_LK))
    out = sdpa.attention_varlen(q, k, v, cq, ck, causal="top-left")
    assert out.dtype == np.float16
    for s in range(len(VARLEN_LQ)):
        qs, ks = slice(cq[s], cq[s + 1]), slice(ck[s], ck[s + 1])
        if VARLEN_LQ[s] == 0:
            continue
        if VARLEN_LK[s] == 0:
            assert np.all(out[qs] == 0)
            continue
        alone = sdpa.attention(*(x.transpose(1, 0, 2) for x in (q[qs], k[ks], v[ks])), causal="top-left")
        assert np.array_equal(out[qs].view(np.uint16), alone.transpose(1, 0, 2).view(np.uint16)), s

"""sdpa.torch against PyTorch's own scaled_dot_product_attention and autograd.

Gold: torch in float64. Naive: torch in float32 on the same inputs. The project's rule
(npref.py): sdpa's error <= 2 x torch-fp32's error + the derived floor.
"""

import math
import warnings

import numpy as np
import pytest

torch = pytest.importorskip(
    "torch", reason="PyTorch is not importable: the comparisons with torch's SDPA and autograd are skipped "
                    "(the NumPy tests still run; SDPA_PY_TORCH=1 bash scripts/test.sh installs torch in .venv)")
F = torch.nn.functional

import sdpa  # noqa: E402
import sdpa.torch as st  # noqa: E402
from npref import EPS32, assert_within, attention_ref, backward_floors, forward_floors, smax  # noqa: E402


def rand(gen, *shape, scale=1.0):
    return torch.randn(*shape, generator=gen, dtype=torch.float32) * scale


def tensors(seed, B=2, Hq=4, Hkv=4, L=19, S=23, E=16, Ev=12):
    g = torch.Generator().manual_seed(seed)
    return rand(g, B, Hq, L, E), rand(g, B, Hkv, S, E), rand(g, B, Hkv, S, Ev)


def np64(t):
    return t.detach().double().numpy()


def torch_opts(kw):
    """sdpa/npref option names for a torch call's keywords."""
    o = {}
    if kw.get("is_causal"):
        o["causal"] = "top-left"
    if kw.get("scale") is not None:
        o["scale"] = kw["scale"]
    if kw.get("attn_mask") is not None:
        o["mask"] = kw["attn_mask"].numpy()
    return o


FORWARD_CASES = {
    "plain": (dict(), dict()),
    "causal-L<S": (dict(), dict(is_causal=True)),
    "causal-L>S": (dict(L=23, S=19), dict(is_causal=True)),
    "scale": (dict(), dict(scale=0.9)),
    "gqa": (dict(Hq=6, Hkv=2), dict(enable_gqa=True, is_causal=True)),
    "rank3": (dict(B=1), dict()),
}


@pytest.mark.parametrize("case", FORWARD_CASES, ids=list(FORWARD_CASES))
def test_forward_against_torch(case):
    shape, kw = FORWARD_CASES[case]
    q, k, v = tensors(1, **shape)
    if case == "rank3":
        q, k, v = q[0], k[0], v[0]
    ours = st.scaled_dot_product_attention(q, k, v, **kw)
    naive = F.scaled_dot_product_attention(q, k, v, **kw)
    gold = F.scaled_dot_product_attention(q.double(), k.double(), v.double(), **kw)
    assert ours.dtype == torch.float32 and ours.shape == gold.shape
    q4, k4, v4 = (x.numpy().reshape((1,) * (4 - x.ndim) + tuple(x.shape)) for x in (q, k, v))
    lse_gold = attention_ref(q4, k4, v4, **torch_opts(kw))[1]
    floor = forward_floors(q4, k4, v4, lse_gold, **torch_opts(kw))[0]
    assert_within("out", ours.numpy(), naive.numpy(), gold.numpy(), floor)


@pytest.mark.parametrize("kind", ["bool", "float", "bool-broadcast"])
def test_masks_against_torch(kind):
    q, k, v = tensors(2)
    g = torch.Generator().manual_seed(2)
    if kind == "bool":
        mask = torch.rand(2, 4, 19, 23, generator=g) < 0.7
        mask[..., 0] = True
    elif kind == "float":
        mask = rand(g, 19, 23, scale=2.0)
    else:
        mask = torch.rand(1, 4, 1, 23, generator=g) < 0.5
        mask[..., 0] = True
    ours = st.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    naive = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    gm = mask if mask.dtype == torch.bool else mask.double()
    gold = F.scaled_dot_product_attention(q.double(), k.double(), v.double(), attn_mask=gm)
    opts = dict(mask=mask.numpy())
    floor = forward_floors(q.numpy(), k.numpy(), v.numpy(), attention_ref(q.numpy(), k.numpy(), v.numpy(), **opts)[1],
                           **opts)[0]
    assert_within("out", ours.numpy(), naive.numpy(), gold.numpy(), floor)


@pytest.mark.parametrize("case", ["plain", "causal", "gqa-causal", "mask"])
def test_autograd_against_torch_fp64(case):
    """Gradients through sdpa's backward against torch's autograd of its own SDPA in float64."""
    shape = dict(Hq=6, Hkv=3) if case == "gqa-causal" else dict()
    q, k, v = tensors(3, **shape)
    g = torch.Generator().manual_seed(3)
    kw = dict(is_causal=case in ("causal", "gqa-causal"), enable_gqa=case == "gqa-causal")
    if case == "mask":
        kw["attn_mask"] = rand(g, 1, 1, 19, 23)
    w = rand(g, q.shape[0], q.shape[1], q.shape[2], v.shape[3])  # loss = sum(out * w): dout = w

    def grads(fn, dtype):
        xs = [x.detach().to(dtype).requires_grad_() for x in (q, k, v)]
        kwd = dict(kw)
        if "attn_mask" in kwd:
            kwd["attn_mask"] = kwd["attn_mask"].to(dtype)
        (fn(*xs, **kwd) * w.to(dtype)).sum().backward()
        return [x.grad.double().numpy() for x in xs]

    ours = grads(st.scaled_dot_product_attention, torch.float32)
    naive = grads(F.scaled_dot_product_attention, torch.float32)
    gold = grads(F.scaled_dot_product_attention, torch.float64)
    opts = torch_opts(kw)
    floors = backward_floors(q.numpy(), k.numpy(), v.numpy(), w.numpy(), gold[2], **opts)
    for name, a, n, gd, fl in zip(("dq", "dk", "dv"), ours, naive, gold, floors):
        assert_within(name, a, n, gd, fl)


def _gradcheck_tolerance(q, k, v):
    """eps and atol for a finite-difference check of an fp32 function, from first principles.

    gradcheck compares analytical J with (f(x+e) - f(x-e)) / 2e. In fp32 that quotient is off by
      rounding   delta / e,       delta = sdpa's forward error bound (the rule: 2 naive + floor)
      step       2 u |x| |J| / e  (x +- e is itself rounded to fp32)
      truncation e^2 M3 / 6,      M3 = bound on the third derivative along one coordinate.
    Along one coordinate of q (or k) the output is a p-weighted mean of v with p proportional to
    exp(t Z), |Z - E Z| <= r = 2 |beta| max(|q|, |k|); its t-derivatives are covariances with
    (Z - E Z)^n, so |J| <= 2 max|v| r and |M3| <= 8 max|v| r^3 (and dout/dv = p <= 1, M3 = 0).
    e minimises delta / e + e^2 M3 / 6.
    """
    qn, kn, vn = (x.detach().numpy() for x in (q, k, v))
    beta = 1 / math.sqrt(qn.shape[-1])
    with torch.no_grad():
        gold = F.scaled_dot_product_attention(q.double(), k.double(), v.double()).numpy()
        naive = F.scaled_dot_product_attention(q, k, v).numpy()
    lse_gold = attention_ref(qn, kn, vn)[1]
    delta = 2 * np.abs(naive - gold).max() + forward_floors(qn, kn, vn, lse_gold)[0]
    vmax = np.abs(vn).max()
    xmax = max(np.abs(qn).max(), np.abs(kn).max(), vmax)
    r = 2 * beta * max(np.abs(qn).max(), np.abs(kn).max())
    jmax = max(2 * vmax * r, 1.0)
    m3 = 8 * vmax * r ** 3
    eps = (3 * delta / m3) ** (1 / 3)
    analytic = max(backward_floors(qn, kn, vn, np.ones_like(gold), vn)[:2])  # backward's own error, one-hot dout
    atol = delta / eps + 2 * EPS32 * 2 * xmax * jmax / eps + eps ** 2 * m3 / 6 + analytic
    return float(eps), float(atol)


def test_gradcheck():
    q, k, v = (x.requires_grad_() for x in tensors(4, B=1, Hq=2, Hkv=2, L=5, S=6, E=4, Ev=3))
    eps, atol = _gradcheck_tolerance(q, k, v)
    assert atol < 0.02  # the check still resolves gradients of order 1
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "not a double precision floating point": known, accounted for above
        assert torch.autograd.gradcheck(st.scaled_dot_product_attention, (q, k, v), eps=eps, atol=atol, rtol=0)

        class Off(torch.autograd.Function):  # the same with dq off by 5%: the check must catch it
            @staticmethod
            def forward(ctx, q, k, v):
                with torch.enable_grad():
                    q2, k2, v2 = (x.detach().requires_grad_() for x in (q, k, v))
                    out = st.scaled_dot_product_attention(q2, k2, v2)
                ctx.save_for_backward(q2, k2, v2, out)
                return out.detach()

            @staticmethod
            def backward(ctx, dout):
                q2, k2, v2, out = ctx.saved_tensors
                dq, dk, dv = torch.autograd.grad(out, (q2, k2, v2), dout, retain_graph=True)
                return dq * 1.05, dk, dv

        assert not torch.autograd.gradcheck(Off.apply, (q, k, v), eps=eps, atol=atol, rtol=0, raise_exception=False)


class Block(torch.nn.Module):
    """Causal self-attention as models write it: one projection to [B, N, 3, H, D], viewed per head."""

    def __init__(self, d, heads, attn):
        super().__init__()
        self.heads, self.attn = heads, attn
        self.qkv = torch.nn.Linear(d, 3 * d)
        self.proj = torch.nn.Linear(d, d)

    def forward(self, x):
        B, N, d = x.shape
        q, k, v = self.qkv(x).view(B, N, 3, self.heads, d // self.heads).unbind(2)  # [B, N, H, D] views
        y = self.attn(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True)
        return self.proj(y.transpose(1, 2).reshape(B, N, d))


def test_drop_in_inside_a_model():
    torch.manual_seed(5)
    ref = Block(32, 4, F.scaled_dot_product_attention)
    ours = Block(32, 4, st.scaled_dot_product_attention)
    ours.load_state_dict(ref.state_dict())
    gold = Block(32, 4, F.scaled_dot_product_attention).double()
    gold.load_state_dict(ref.state_dict())
    x = torch.randn(3, 17, 32)
    target = torch.randn(3, 17, 32)

    def step(m, dtype):
        m.zero_grad()
        loss = ((m(x.to(dtype)) - target.to(dtype)) ** 2).mean()
        loss.backward()
        return loss.item(), {n: p.grad.double().numpy() for n, p in m.named_parameters()}

    l_ours, g_ours = step(ours, torch.float32)
    l_ref, g_ref = step(ref, torch.float32)
    l_gold, g_gold = step(gold, torch.float64)
    # Floor: the forward rule's relative floor, 8 eps (1 + smax), at the scale of each quantity;
    # smax from the block's actual queries and keys.
    with torch.no_grad():
        q, k, _ = ref.qkv(x).view(3, 17, 3, 4, 8).unbind(2)
        sm = smax(q.transpose(1, 2).numpy(), k.transpose(1, 2).numpy())
    rel = 8 * EPS32 * (1 + sm)
    assert_within("loss", np.array(l_ours), np.array(l_ref), np.array(l_gold), rel * abs(l_gold))
    for name in g_gold:
        assert_within(name, g_ours[name], g_ref[name], g_gold[name], rel * np.abs(g_gold[name]).max())
    # And it trains: a few SGD steps lower the loss.
    opt = torch.optim.SGD(ours.parameters(), lr=0.1)
    losses = []
    for _ in range(5):
        opt.zero_grad()
        loss = ((ours(x) - target) ** 2).mean()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0]


def test_strided_tensors_are_read_in_place():
    g = torch.Generator().manual_seed(6)
    buf = rand(g, 2, 30, 4, 16)  # [B, N, H, D]
    q = buf.transpose(1, 2)
    ptr, shape, strides = sdpa._ext.inspect(q)
    assert ptr == buf.data_ptr() and strides == tuple(q.stride())
    # The small-call path hands the extension a DLPack capsule instead (_core._fast_args): the same memory.
    (capsule,) = sdpa._core._fast_args("torch", q)
    assert sdpa._ext.inspect(capsule) == (ptr, shape, strides)
    out = st.scaled_dot_product_attention(q, q, q, is_causal=True)
    dense = q.contiguous()
    assert torch.equal(out, st.scaled_dot_product_attention(dense, dense, dense, is_causal=True))
    sub = q[:, 1:, 3:, 2:10]  # starts inside the buffer
    assert sdpa._ext.inspect(sub)[0] == sub.data_ptr() != buf.data_ptr()
    assert torch.equal(st.scaled_dot_product_attention(sub, sub, sub),
                       st.scaled_dot_product_attention(sub.contiguous(), sub.contiguous(), sub.contiguous()))


def test_attention_on_tensors_returns_tensors_and_lse():
    q, k, v = (x.requires_grad_() for x in tensors(7))
    out, lse = sdpa.attention(q, k, v, causal="bottom-right", return_lse=True)
    assert isinstance(out, torch.Tensor) and isinstance(lse, torch.Tensor)
    assert out.grad_fn is not None and not lse.requires_grad
    ref_out, ref_lse, _ = attention_ref(np64(q), np64(k), np64(v), causal="bottom-right")
    assert lse.shape == (2, 4, 19)
    out.sum().backward()  # dout is a stride-0 expanded tensor: read in place
    assert q.grad is not None and q.grad.shape == q.shape and k.grad.shape == k.shape
    with torch.no_grad():
        o2 = sdpa.attention(q, k, v, causal="bottom-right")
    assert o2.grad_fn is None and torch.equal(o2, out.detach())


def test_gradient_keeps_the_input_layout():
    buf = torch.randn(1, 12, 2, 8)
    leaf = buf.clone().requires_grad_()
    q = leaf.transpose(1, 2)
    st.scaled_dot_product_attention(q, q, q).sum().backward()
    assert leaf.grad.shape == leaf.shape


def test_a_mask_of_another_kind_is_refused():
    """A NumPy mask beside torch q, k, v (or the reverse) is refused by name, with autograd or without: the
    custom op takes tensors only, and the direct call must not accept what the op refuses."""
    q, k, v = tensors(9, L=5, S=7)
    keep = torch.ones(1, 4, 5, 7, dtype=torch.bool)
    for qq in (q, q.clone().requires_grad_()):
        with pytest.raises(TypeError, match="mask: not the same kind of array as q; pass a PyTorch tensor"):
            sdpa.attention(qq, k, v, mask=keep.numpy())
    with pytest.raises(TypeError, match="mask: not the same kind of array as q; pass a NumPy array"):
        sdpa.attention(q.numpy(), k.numpy(), v.numpy(), mask=keep)
    out = sdpa.attention(q, k, v)
    with pytest.raises(TypeError, match="mask: not the same kind"):
        sdpa.attention_backward(q, k, v, out, sdpa.attention(q, k, v, return_lse=True)[1], torch.ones_like(out),
                                mask=keep.numpy())


def test_fully_masked_row_is_zero_not_nan():
    q, k, v = tensors(8, L=4, S=4)
    mask = torch.ones(4, 4, dtype=torch.bool)
    mask[1] = False
    out = st.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    assert torch.all(out[:, :, 1] == 0) and torch.isfinite(out).all()


def test_errors_name_torch_arguments():
    q, k, v = tensors(9)
    with pytest.raises(TypeError, match=r"^query: dtype torch.float64 .*\.float\(\)"):
        st.scaled_dot_product_attention(q.double(), k, v)
    with pytest.raises(ValueError, match=r"^key: tensor is on device 'meta'"):
        st.scaled_dot_product_attention(q, torch.empty(k.shape, device="meta"), v)
    with pytest.raises(ValueError, match=r"^dropout_p: must be in \[0, 1\), got 1.0"):
        st.scaled_dot_product_attention(q, k, v, dropout_p=1.0)
    with pytest.raises(ValueError, match=r"^dropout_p: must be in \[0, 1\), got -0.1"):
        st.scaled_dot_product_attention(q, k, v, dropout_p=-0.1)
    with pytest.raises(ValueError, match=r"^key: 2 heads differ from query's 4; pass enable_gqa=True"):
        st.scaled_dot_product_attention(q, k[:, :2], v[:, :2])
    with pytest.raises(ValueError, match=r"^attn_mask: requires grad"):
        st.scaled_dot_product_attention(q, k, v, attn_mask=torch.zeros(19, 23, requires_grad=True))
    with torch.no_grad():  # no gradient wanted: the mask is just read
        st.scaled_dot_product_attention(q, k, v, attn_mask=torch.zeros(19, 23, requires_grad=True))
    with pytest.raises(ValueError, match=r"^attn_mask: shape \[1, 1, 19, 5\] does not broadcast"):
        st.scaled_dot_product_attention(q, k, v, attn_mask=torch.zeros(19, 5))
    with pytest.raises(TypeError, match=r"^key: expected a torch.Tensor"):
        st.scaled_dot_product_attention(q, k.numpy(), v)
    with pytest.raises(TypeError, match=r"^k: a NumPy array while q is a PyTorch tensor"):
        sdpa.attention(q, k.numpy(), v)


# ---- dropout -----------------------------------------------------------------------------------------------
def _seed_after(manual_seed):
    """The seed sdpa.torch draws for one call right after torch.manual_seed(manual_seed) (sdpa._core)."""
    torch.manual_seed(manual_seed)
    return int(torch.randint(0, 2 ** 63 - 1, (), dtype=torch.int64))


def test_dropout_follows_torch_manual_seed_and_the_reference():
    """torch.manual_seed makes a call repeatable; the next call draws a fresh mask; the result is the reference
    kernel's (fp64 accumulation) given the seed drawn from torch's generator, within the fp32 rule's floor."""
    q, k, v = tensors(21, Hq=4, Hkv=2)
    kw = dict(dropout_p=0.3, is_causal=True, enable_gqa=True)
    torch.manual_seed(3)
    a = st.scaled_dot_product_attention(q, k, v, **kw)
    fresh = st.scaled_dot_product_attention(q, k, v, **kw)
    torch.manual_seed(3)
    b = st.scaled_dot_product_attention(q, k, v, **kw)
    assert torch.equal(a, b)
    assert (fresh - a).abs().max() > 0.05, "a second call reused the mask"
    plain = st.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    assert (plain - a).abs().max() > 0.05, "dropout_p had no effect"
    ref = sdpa.reference_attention(q, k, v, causal="top-left", dropout_p=0.3, dropout_seed=_seed_after(3))
    qn, kn, vn = (x.numpy() for x in (q, k, v))
    floor = 8 * EPS32 * (1 + smax(qn, kn)) * np.abs(vn).max() / (1 - 0.3)  # kept weights grow by 1/(1 - p)
    assert (a - ref).abs().max().item() <= floor


def test_dropout_keep_rate_through_torch():
    """The mask read back through the drop-in: q = 0 makes every probability 1/S exactly (S a power of 2), and
    v = identity (Ev = S) puts keep_ij / (1 - p) / S in out[i, j]. Every entry is then 0 or 1 after scaling, and
    the number kept is Binomial(n, 1 - p): |z| <= 5 fails a fair generator with probability 6e-7."""
    B, H, L, S, p = 2, 4, 64, 128, 0.25
    q = torch.zeros(B, H, L, 8)
    k = torch.randn(B, H, S, 8, generator=torch.Generator().manual_seed(1))
    v = torch.eye(S).expand(B, H, S, S).contiguous()
    torch.manual_seed(0)
    keep = st.scaled_dot_product_attention(q, k, v, dropout_p=p) * ((1 - p) * S)
    assert torch.all((keep - keep.round()).abs() < 1e-5) and set(keep.round().unique().tolist()) <= {0.0, 1.0}
    n = keep.numel()
    z = (keep.round().sum().item() - n * (1 - p)) / math.sqrt(n * p * (1 - p))
    assert abs(z) <= 5, f"kept {keep.round().sum().item()} of {n} at p = {p}: z = {z:.2f}"


def test_dropout_gradcheck_with_a_fixed_seed():
    """The backward regenerates the forward's mask: with the generator reseeded before every call the function is
    deterministic, and its finite differences are the analytical gradient. The tolerance is test_gradcheck's,
    scaled by 1/(1 - p): every term of it (the forward's error, the derivatives) grows with the kept weights."""
    p = 0.3
    q, k, v = (x.requires_grad_() for x in tensors(4, B=1, Hq=2, Hkv=2, L=5, S=6, E=4, Ev=3))
    eps, atol = _gradcheck_tolerance(q, k, v)
    atol /= 1 - p

    def dropped(q, k, v):
        torch.manual_seed(17)
        return st.scaled_dot_product_attention(q, k, v, dropout_p=p)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # fp32: accounted for in the tolerance
        assert torch.autograd.gradcheck(dropped, (q, k, v), eps=eps, atol=atol, rtol=0)

        def other_mask_in_backward(q, k, v):  # the same forward, a backward with another seed's mask: must fail
            torch.manual_seed(17)
            seed = int(torch.randint(0, 2 ** 63 - 1, (), dtype=torch.int64))
            out, lse = sdpa.attention(q.detach(), k.detach(), v.detach(), dropout_p=p, dropout_seed=seed,
                                      return_lse=True)
            return _WrongMask.apply(q, k, v, out, lse, seed)

        assert not torch.autograd.gradcheck(other_mask_in_backward, (q, k, v), eps=eps, atol=atol, rtol=0,
                                            raise_exception=False)


class _WrongMask(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, out, lse, seed):
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.seed = seed
        return out.clone()

    @staticmethod
    def backward(ctx, dout):
        q, k, v, out, lse = ctx.saved_tensors
        grads = sdpa.attention_backward(q, k, v, out, lse, dout.contiguous(), dropout_p=0.3, dropout_seed=ctx.seed + 1)
        return grads + (None, None, None)


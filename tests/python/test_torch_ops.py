"""The custom ops sdpa::forward / sdpa::backward: opcheck, gradcheck, torch.compile, torch.export.

The op's numerics are those of sdpa.torch (test_torch.py judges them against torch in
float64); here the question is whether PyTorch's machinery sees a well-formed op: the
schema, the fake (meta) implementations, the autograd registration, no graph break under
torch.compile(fullgraph=True), and an exported program that runs in a new process.
"""

import os
import subprocess
import sys
import textwrap
import unittest.mock as mock

import numpy as np
import pytest

torch = pytest.importorskip(
    "torch", reason="PyTorch is not importable: the custom-op tests are skipped "
                    "(SDPA_PY_TORCH=1 bash scripts/python_test.sh installs torch in .venv)")

import sdpa  # noqa: E402
import sdpa.torch as st  # noqa: E402
from npref import EPS32, assert_within, smax  # noqa: E402


def _inputs(seed, B=2, Hq=4, Hkv=2, L=7, S=9, E=8, Ev=6, grad=False):
    g = torch.Generator().manual_seed(seed)
    xs = [torch.randn(B, Hq, L, E, generator=g), torch.randn(B, Hkv, S, E, generator=g),
          torch.randn(B, Hkv, S, Ev, generator=g)]
    return [x.requires_grad_(grad) for x in xs]


def _options(**kw):
    """The op's trailing arguments (sdpa._core.KERNEL_ARGS, in order), the defaults of sdpa.attention overridden
    by kw (kernel argument names: keep, window_left, ...)."""
    o = sdpa._core._options({})
    o.update(kw)
    return tuple(o[name] for name in sdpa._core.KERNEL_ARG_NAMES)


OPCHECK_CASES = {
    "plain": dict(),
    "gqa-causal-window": dict(causal="bottom-right", window_left=3, window_right=0),
    "softcap-scale": dict(softcap=5.0, scale=0.3),
    "float-mask": "float",
    "bool-mask": "bool",
    "dropout": dict(dropout_p=0.3, dropout_seed=2 ** 62 + 5, dropout_offset=7, causal="top-left"),
}


@pytest.mark.parametrize("case", OPCHECK_CASES, ids=list(OPCHECK_CASES))
def test_opcheck_forward_and_backward(case):
    q, k, v = _inputs(1, grad=True)
    kw = OPCHECK_CASES[case]
    if kw == "float":
        kw = dict(mask=torch.randn(2, 1, 7, 9))
    elif kw == "bool":
        keep = torch.rand(1, 4, 7, 9, generator=torch.Generator().manual_seed(1)) < 0.6
        keep[..., 0] = True
        kw = dict(keep=keep.view(torch.uint8))
    opts = _options(**kw)
    # test_schema, test_autograd_registration, test_faketensor, test_aot_dispatch_dynamic
    torch.library.opcheck(torch.ops.sdpa.forward.default, (q, k, v) + opts)
    with torch.no_grad():
        out, lse = torch.ops.sdpa.forward(q, k, v, *opts)
    dout = torch.randn_like(out)
    torch.library.opcheck(torch.ops.sdpa.backward.default, (q.detach(), k.detach(), v.detach(), out, lse, dout) + opts)


def test_lse_is_not_differentiable_and_the_op_is_what_sdpa_calls():
    q, k, v = _inputs(2, grad=True)
    out, lse = torch.ops.sdpa.forward(q, k, v, *_options())
    assert out.requires_grad and not lse.requires_grad
    ours = st.scaled_dot_product_attention(q, k, v, enable_gqa=True)
    assert ours.grad_fn is not None and torch.equal(ours, out)


class TinyModel(torch.nn.Module):
    """Pre-norm causal GQA self-attention + MLP, the attention written as models write it."""

    def __init__(self, d=32, heads=4, kv_heads=2):
        super().__init__()
        self.heads, self.kv_heads, self.dh = heads, kv_heads, d // heads
        self.norm = torch.nn.LayerNorm(d)
        self.q = torch.nn.Linear(d, d)
        self.kv = torch.nn.Linear(d, 2 * kv_heads * self.dh)
        self.proj = torch.nn.Linear(d, d)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(d, 2 * d), torch.nn.GELU(), torch.nn.Linear(2 * d, d))

    def qk(self, x):
        B, N, _ = x.shape
        h = self.norm(x)
        q = self.q(h).view(B, N, self.heads, self.dh).transpose(1, 2)  # (B, H, N, D) views
        k, v = self.kv(h).view(B, N, 2, self.kv_heads, self.dh).unbind(2)
        return q, k.transpose(1, 2), v.transpose(1, 2)

    def forward(self, x):
        B, N, d = x.shape
        q, k, v = self.qk(x)
        y = st.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        x = x + self.proj(y.transpose(1, 2).reshape(B, N, d))
        return x + self.mlp(x)


def _model_and_input():
    torch.manual_seed(11)
    model = TinyModel()
    x = torch.randn(3, 13, 32)
    return model, x


def _loss_and_grads(model, x, run=None):
    """model's output and parameter gradients of mean(out^2), computed by run (model itself, or compiled)."""
    model.zero_grad()
    out = (model if run is None else run)(x)
    (out ** 2).mean().backward()
    return out.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}


def _floor(model, x, scale_of):
    """The project's relative floor 8 eps (1 + smax) at the scale of a quantity; smax from the model's
    own queries and keys (Cauchy-Schwarz bound on |score|)."""
    with torch.no_grad():
        q, k, _ = model.qk(x)
        sm = smax(q.contiguous().numpy(), k.contiguous().numpy())
    return 8 * EPS32 * (1 + sm) * scale_of


def _gold(model, x, grads=True):
    """The float64 oracle: the same weights in float64 with torch's own SDPA."""
    gold_model = TinyModel().double()
    gold_model.load_state_dict(model.state_dict())

    def gold_attn(q, k, v, **kw):
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, **kw)

    with mock.patch.object(st, "scaled_dot_product_attention", gold_attn):
        if grads:
            return _loss_and_grads(gold_model, x.double())
        with torch.no_grad():
            return gold_model(x.double()), {}


def test_compile_fullgraph_matches_eager():
    """torch.compile(fullgraph=True) raises on any graph break; values and gradients must then be eager's,
    within the rule against the same model in float64 (inductor may fuse and reorder the other layers' fp32
    arithmetic, so bitwise equality is not promised; the attention op itself runs the same code): the
    compiled error at most twice eager's plus the floor."""
    model, x = _model_and_input()
    out_eager, g_eager = _loss_and_grads(model, x)
    compiled = torch.compile(model, fullgraph=True)
    out_comp, g_comp = _loss_and_grads(model, x, compiled)
    out_gold, g_gold = _gold(model, x)
    assert_within("out", out_comp.numpy(), out_eager.numpy(), out_gold.numpy(),
                  _floor(model, x, out_gold.abs().max().item()))
    for name in g_gold:
        assert_within(name, g_comp[name].numpy(), g_eager[name].numpy(), g_gold[name].numpy(),
                      _floor(model, x, g_gold[name].abs().max().item()))


def test_compile_dynamic_shapes():
    """The fake implementations serve symbolic shapes: one compiled graph, two sequence lengths."""
    model, _ = _model_and_input()
    compiled = torch.compile(model, fullgraph=True, dynamic=True)
    for n in (13, 21):
        xs = torch.randn(2, n, 32)
        with torch.no_grad():
            ours, eager = compiled(xs), model(xs)
        gold = _gold(model, xs, grads=False)[0]
        assert_within(f"out(N={n})", ours.numpy(), eager.numpy(), gold.numpy(),
                      _floor(model, xs, gold.abs().max().item()))


def test_export_runs_after_a_fresh_import(tmp_path):
    model, x = _model_and_input()
    model.eval()
    ep = torch.export.export(model, (x,))
    assert any(n.target is torch.ops.sdpa.forward.default for n in ep.graph.nodes)
    with torch.no_grad():
        expected = model(x)
        assert torch.equal(ep.module()(x), expected)
    path = tmp_path / "model.pt2"
    torch.export.save(ep, str(path))
    torch.save({"x": x, "expected": expected}, str(tmp_path / "io.pt"))
    # A new interpreter: only `import sdpa.torch` registers the op the program names.
    script = textwrap.dedent(f"""
        import torch, sdpa.torch
        ep = torch.export.load({str(path)!r})
        io = torch.load({str(tmp_path / "io.pt")!r})
        with torch.no_grad():
            got = ep.module()(io["x"])
        print("equal" if torch.equal(got, io["expected"]) else f"differs by {{(got - io['expected']).abs().max()}}")
    """)
    env = dict(os.environ)
    res = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    assert res.stdout.strip().splitlines()[-1] == "equal"


def test_fake_tensor_shapes_match_the_real_op():
    q, k, v = _inputs(3)
    opts = _options(causal="top-left")
    real_out, real_lse = torch.ops.sdpa.forward(q, k, v, *opts)
    from torch._subclasses.fake_tensor import FakeTensorMode
    with FakeTensorMode() as mode:
        fq, fk, fv = (mode.from_tensor(t) for t in (q, k, v))
        fake_out, fake_lse = torch.ops.sdpa.forward(fq, fk, fv, *opts)
    assert fake_out.shape == real_out.shape and fake_out.stride() == real_out.stride()
    assert fake_lse.shape == real_lse.shape and fake_lse.dtype == real_lse.dtype == torch.float32
    assert np.isfinite(real_lse.numpy()).all()


def test_inference_calls_the_extension_directly_with_the_same_bits():
    """Without autograd (no input requiring grad, or torch.no_grad) and outside tracing, sdpa.attention and the
    drop-in skip the custom op's dispatch (its cost equals a decoding step's kernel); with grad they take it.
    Both ways run the same kernel call, so the outputs are equal bit for bit."""
    q, k, v = _inputs(11, L=1, S=40)
    mask = torch.rand(2, 1, 1, 40) < 0.8
    calls = []
    real = sdpa._ops.forward

    def counting(*args, **kw):
        calls.append(1)
        return real(*args, **kw)

    with mock.patch.object(sdpa._ops, "forward", counting):
        plain = st.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)
        assert calls == [], "an inference call went through the custom op"
        qg, kg, vg = (x.clone().requires_grad_(True) for x in (q, k, v))
        graded = st.scaled_dot_product_attention(qg, kg, vg, attn_mask=mask, enable_gqa=True)
        assert calls == [1] and graded.requires_grad
        with torch.no_grad():
            st.scaled_dot_product_attention(qg, kg, vg, attn_mask=mask, enable_gqa=True)
        assert calls == [1], "torch.no_grad() still went through the custom op"
    assert torch.equal(plain, graded.detach())
    op_out, _ = torch.ops.sdpa.forward(q, k, v, *_options(keep=mask.view(torch.uint8)))
    assert torch.equal(plain, op_out)


def test_eager_autograd_skips_the_op_with_the_same_bits():
    """An eager call that needs gradients runs the op's bodies through sdpa._ops.EagerAutograd, not the op's
    dispatch (_core._torch_route: ~200 us of a small training step); forward and backward must give the op's own
    bits, with a mask and with dropout (the seed saved with the options), and refuse a double backward as the op
    does."""
    q, k, v = _inputs(12, grad=True)
    keep = torch.rand(2, 1, 7, 9, generator=torch.Generator().manual_seed(3)) < 0.7
    keep[..., 0] = True
    dout = torch.randn(2, 4, 7, 6, generator=torch.Generator().manual_seed(4))
    assert sdpa._core._torch_route(q, k, v, keep) == "autograd"
    with torch.no_grad():
        assert sdpa._core._torch_route(q, k, v, keep) == "direct"
    for opts in (dict(keep=keep.view(torch.uint8)), dict(keep=keep.view(torch.uint8), dropout_p=0.25,
                                                         dropout_seed=2 ** 40 + 3, dropout_offset=5)):
        got = []
        for run in (torch.ops.sdpa.forward.default, sdpa._ops.EagerAutograd.apply):
            out, lse = run(q, k, v, *_options(**opts))
            grads = torch.autograd.grad(out, (q, k, v), dout)
            got.append((out, lse) + grads)
        assert type(got[1][0].grad_fn).__name__ == "EagerAutogradBackward"
        for ours, op in zip(got[1], got[0]):
            assert torch.equal(ours, op)
    out, _ = sdpa._ops.EagerAutograd.apply(q, k, v, *_options())
    (dq,) = torch.autograd.grad(out, q, dout, create_graph=True)
    with pytest.raises(RuntimeError):
        dq.sum().backward()
    with torch.overrides.TorchFunctionMode():  # anything that traces or wraps the call still gets the op
        assert sdpa._core._torch_route(q, k, v) == "op"


def test_a_forward_without_lse_gives_the_same_out():
    """Without return_lse the direct route allocates no lse and the kernel writes none; out is unchanged."""
    q, k, v = _inputs(13, L=1, S=40)
    out, lse = st.attention(q, k, v, return_lse=True)
    assert torch.equal(st.attention(q, k, v), out) and lse.shape == (2, 4, 1)
    qn, kn, vn = (x.numpy() for x in _inputs(14, L=5))
    out_n, _ = st.attention(qn, kn, vn, causal="bottom-right", return_lse=True)
    assert np.array_equal(st.attention(qn, kn, vn, causal="bottom-right"), out_n)

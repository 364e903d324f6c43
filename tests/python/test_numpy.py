"""sdpa.attention on NumPy arrays against the float64 NumPy oracle (npref.py), under the
project's rule: sdpa's fp32 error <= 2 x the naive fp32 implementation's error + a floor."""

import threading
import time

import numpy as np
import pytest

import sdpa
from npref import assert_within, attention_ref, backward_ref, backward_floors, forward_floors


def rand(rng, shape, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(np.float32)


def qkv(seed, B=2, Hq=4, Hkv=2, Nq=37, Nk=53, Dk=16, Dv=24, scale=1.0):
    rng = np.random.default_rng(seed)
    return (rand(rng, (B, Hq, Nq, Dk), scale), rand(rng, (B, Hkv, Nk, Dk), scale), rand(rng, (B, Hkv, Nk, Dv)))


def check_forward(q, k, v, fn=sdpa.attention, **opts):
    out, lse = fn(q, k, v, return_lse=True, **opts)
    assert isinstance(out, np.ndarray) and out.dtype == np.float32
    gold, lse_gold, _ = attention_ref(q, k, v, dtype=np.float64, **opts)
    naive, lse_naive, _ = attention_ref(q, k, v, dtype=np.float32, **opts)
    f_out, f_lse = forward_floors(q, k, v, lse_gold, **opts)
    assert_within("out", out, naive, gold, f_out)
    assert_within("lse", lse, lse_naive, lse_gold, f_lse)
    return out, lse


CASES = [
    dict(),
    dict(causal="top-left"),
    dict(causal="bottom-right"),
    dict(scale=1.0),
    dict(scale=-0.3),
    dict(softcap=2.0, scale=1.0),
    dict(window=(5, 3)),
    dict(window=(4, None), causal="top-left"),
    dict(window=(-1, 0), causal="bottom-right"),
]


@pytest.mark.parametrize("opts", CASES, ids=lambda o: ",".join(f"{k}={v}" for k, v in o.items()) or "plain")
@pytest.mark.parametrize("shape", [dict(), dict(Nq=53, Nk=37), dict(Hq=3, Hkv=1, Nq=1, Nk=130, Dk=64, Dv=64)],
                         ids=["nq<nk", "nq>nk", "mqa-decode"])
def test_forward_against_fp64(opts, shape):
    q, k, v = qkv(1, **shape)
    check_forward(q, k, v, **opts)


def test_large_scores_stay_within_rule():
    # Scores of size ~50: the floor grows with smax; the naive error grows too.
    q, k, v = qkv(2, scale=3.0)
    check_forward(q, k, v, scale=1.0)


def test_reference_kernel_against_fp64():
    q, k, v = qkv(3)
    check_forward(q, k, v, fn=sdpa.reference_attention, causal="bottom-right")


def test_gqa_equals_repeated_heads():
    q, k, v = qkv(4, Hq=6, Hkv=2)
    out = sdpa.attention(q, k, v, causal="top-left")
    rep = sdpa.attention(q, np.repeat(k, 3, axis=1), np.repeat(v, 3, axis=1), causal="top-left")
    check_forward(q, k, v, causal="top-left")
    np.testing.assert_allclose(out, rep, rtol=0, atol=1e-6)


def test_lower_ranks_follow_the_cli():
    q, k, v = qkv(5, B=1, Hq=2, Hkv=2)
    out4, lse4 = sdpa.attention(q, k, v, return_lse=True)
    out3, lse3 = sdpa.attention(q[0], k[0], v[0], return_lse=True)
    out2, lse2 = sdpa.attention(q[0, 1], k[0, 1], v[0, 1], return_lse=True)
    assert out3.shape == out4.shape[1:] and lse3.shape == lse4.shape[1:]
    assert out2.shape == out4.shape[2:] and lse2.shape == lse4.shape[2:]
    np.testing.assert_array_equal(out3, out4[0])
    np.testing.assert_array_equal(out2, out4[0, 1])
    np.testing.assert_array_equal(lse2, lse4[0, 1])


# ---- strided views: read in place ---------------------------------------------------

def test_transposed_bnhd_buffer_is_not_copied():
    rng = np.random.default_rng(6)
    B, N, H, D = 2, 40, 4, 16
    buf = rand(rng, (B, N, H, D))  # the layout models keep
    q = buf.transpose(0, 2, 1, 3)  # [B, H, N, D] view of it
    assert not q.flags.c_contiguous and np.shares_memory(q, buf)
    ptr, shape, strides = sdpa._ext.inspect(q)
    assert ptr == buf.ctypes.data  # the extension sees the caller's memory ...
    assert shape == (B, H, N, D) and strides == (N * H * D, D, H * D, 1)  # ... through its strides
    out = sdpa.attention(q, q, q, causal="top-left")
    dense = np.ascontiguousarray(q)
    np.testing.assert_array_equal(out, sdpa.attention(dense, dense, dense, causal="top-left"))
    check_forward(q, q, q, causal="top-left")


def test_sliced_and_broadcast_views():
    q, k, v = qkv(7, Hq=2, Hkv=2, Dk=32, Dv=32)
    qs = q[:, :, ::2, ::2]  # every other query and feature: strides 2
    ks = k[:, :, :, ::2]
    kb = np.broadcast_to(k[:, :1], k.shape)  # stride 0 over heads
    assert sdpa._ext.inspect(kb)[2][1] == 0
    qo, ko, vo = q[:, 1:, 5:, 3:19], k[:, 1:, 2:, 3:19], v[:, 1:, 2:]  # views that start inside their buffers
    assert sdpa._ext.inspect(qo)[0] == q.ctypes.data + 4 * (q.strides[1] // 4 + 5 * q.strides[2] // 4 + 3)
    for a, b, c in [(qs, ks, v), (q, kb, v), (qo, ko, vo)]:
        out = sdpa.attention(a, b, c)
        np.testing.assert_array_equal(
            out, sdpa.attention(np.ascontiguousarray(a), np.ascontiguousarray(b), np.ascontiguousarray(c)))
        check_forward(a, b, c)


def test_negative_strides():
    q, k, v = qkv(8)
    qr, vr = q[:, :, ::-1], v[:, :, ::-1, ::-1]
    assert sdpa._ext.inspect(qr)[2][2] < 0
    out = sdpa.attention(qr, k, vr)
    np.testing.assert_array_equal(out, sdpa.attention(qr.copy(), k, vr.copy()))


def test_read_only_inputs():
    q, k, v = qkv(9)
    for x in (q, k, v):
        x.flags.writeable = False
    check_forward(q, k, v)


# ---- masks ----------------------------------------------------------------------------

def test_bool_mask_keeps_where_true():
    q, k, v = qkv(10)
    rng = np.random.default_rng(10)
    keep = rng.random((q.shape[0], q.shape[1], q.shape[2], k.shape[2])) < 0.6
    keep[..., 0] = True  # every row sees a key
    out, _ = check_forward(q, k, v, mask=keep)
    big = np.where(keep, 0, -np.inf).astype(np.float32)  # the same mask, additive
    np.testing.assert_array_equal(out, sdpa.attention(q, k, v, mask=big))


@pytest.mark.parametrize("mshape", [(37, 53), (1, 4, 1, 53), (2, 1, 37, 1), (1, 53), (4, 37, 53)])
def test_float_mask_broadcasts(mshape):
    q, k, v = qkv(11)
    mask = rand(np.random.default_rng(11), mshape, 2.0)
    check_forward(q, k, v, mask=mask)
    full = np.ascontiguousarray(np.broadcast_to(mask.reshape((1,) * (4 - mask.ndim) + mask.shape),
                                                (2, 4, 37, 53)))
    np.testing.assert_array_equal(sdpa.attention(q, k, v, mask=mask), sdpa.attention(q, k, v, mask=full))


def test_masked_rows_are_zero_with_lse_minus_inf():
    q, k, v = qkv(12, Nq=6, Nk=6)
    keep = np.ones((6, 6), dtype=bool)
    keep[2] = False  # query 2 sees nothing
    out, lse = check_forward(q, k, v, mask=keep)
    assert np.all(out[:, :, 2] == 0) and np.all(lse[:, :, 2] == -np.inf)
    assert np.all(np.isfinite(out))


def test_mask_with_causal_and_window_combine():
    q, k, v = qkv(13)
    mask = rand(np.random.default_rng(13), (37, 53))
    check_forward(q, k, v, mask=mask, causal="bottom-right", window=(8, -1))


# ---- backward -------------------------------------------------------------------------

@pytest.mark.parametrize("opts", [dict(), dict(causal="top-left"), dict(causal="bottom-right", softcap=3.0),
                                  dict(window=(3, 3), scale=0.5)],
                         ids=["plain", "top-left", "bottom-right+softcap", "window"])
def test_backward_against_fp64(opts):
    q, k, v = qkv(14)
    dout = rand(np.random.default_rng(15), (2, 4, 37, 24))
    out, lse = sdpa.attention(q, k, v, return_lse=True, **opts)
    dq, dk, dv = sdpa.attention_backward(q, k, v, out, lse, dout, **opts)
    assert dq.shape == q.shape and dk.shape == k.shape and dv.shape == v.shape
    gold = backward_ref(attention_ref(q, k, v, dtype=np.float64, **opts)[2], dout)
    naive = backward_ref(attention_ref(q, k, v, dtype=np.float32, **opts)[2], dout)
    floors = backward_floors(q, k, v, dout, gold[2], **opts)
    for name, fast, n, g, f in zip(("dq", "dk", "dv"), (dq, dk, dv), naive, gold, floors):
        assert_within(name, fast, n, g, f)


def test_backward_gradient_has_input_layout():
    rng = np.random.default_rng(16)
    buf = rand(rng, (1, 12, 2, 8))
    q = buf.transpose(0, 2, 1, 3)
    out, lse = sdpa.attention(q, q, q, return_lse=True)
    dq, _, _ = sdpa.attention_backward(q, q, q, out, lse, np.ones_like(out))
    assert dq.strides == q.strides  # a [B, N, H, D] gradient for a [B, N, H, D] buffer


# ---- threads, GIL ---------------------------------------------------------------------

def test_same_bits_for_any_thread_count():
    q, k, v = qkv(17, Nq=200, Nk=300)
    a = sdpa.attention(q, k, v, threads=1, causal="top-left")
    b = sdpa.attention(q, k, v, threads=2, causal="top-left")
    np.testing.assert_array_equal(a, b)


def test_gil_is_released_during_compute():
    q, k, v = qkv(18, B=1, Hq=8, Hkv=8, Nq=1024, Nk=1024, Dk=64, Dv=64)
    t0 = time.perf_counter()
    sdpa.attention(q, k, v, threads=1)
    once = time.perf_counter() - t0
    reps = max(1, int(0.3 / max(once, 1e-3)))  # about 0.3 s of kernel time
    span = {}

    def work():
        span["start"] = time.perf_counter()
        for _ in range(reps):
            sdpa.attention(q, k, v, threads=1)
        span["end"] = time.perf_counter()

    ticks = []
    th = threading.Thread(target=work)
    th.start()
    while th.is_alive():
        ticks.append(time.perf_counter())
        time.sleep(0.001)
    th.join()
    inside = [t for t in ticks if span["start"] < t < span["end"]]
    # With the GIL held for each call, this thread could run only between calls.
    assert len(inside) >= 0.5 * (span["end"] - span["start"]) / 0.002, (len(inside), span, reps)


def test_concurrent_calls_from_threads():
    cases = [qkv(30 + i, Nq=120, Nk=150) for i in range(4)]
    serial = [sdpa.attention(*c, causal="bottom-right") for c in cases]
    results = [None] * len(cases)

    def run(i):
        results[i] = sdpa.attention(*cases[i], causal="bottom-right")

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(cases))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for a, b in zip(results, serial):
        np.testing.assert_array_equal(a, b)


# ---- errors ---------------------------------------------------------------------------

def test_float64_is_refused_with_a_hint():
    q, k, v = qkv(19)
    with pytest.raises(TypeError, match=r"^k: dtype float64 .*float32.*astype"):
        sdpa.attention(q, k.astype(np.float64), v)


@pytest.mark.parametrize("bad, match", [
    (lambda q, k, v: (q, k.astype(np.float16), v), r"^k: dtype float16"),
    (lambda q, k, v: (q, k, v.astype(np.int32)), r"^v: dtype int32"),
    (lambda q, k, v: (q.tolist(), k, v), r"^q: expected a NumPy array or a PyTorch tensor, got builtins.list"),
])
def test_type_errors_name_the_argument(bad, match):
    with pytest.raises(TypeError, match=match):
        sdpa.attention(*bad(*qkv(20)))


@pytest.mark.parametrize("bad, match", [
    (lambda q, k, v: (q, k[0], v), r"^k: rank 3"),
    (lambda q, k, v: (q[0, 0, 0], k[0, 0, 0], v[0, 0, 0]), r"^q: shape \(16,\) has rank 1"),
    (lambda q, k, v: (q, k[:, :, :, :8], v), r"^k: head dim 8 differs from q's 16"),
    (lambda q, k, v: (q, k, v[:, :, :10]), r"^v: shape .* should be"),
    (lambda q, k, v: (q[:, :3], k, v), r"^k: query heads Hq = 3 is not a multiple of kv heads Hkv = 2"),
])
def test_shape_errors_name_the_argument(bad, match):
    with pytest.raises(ValueError, match=match):
        sdpa.attention(*bad(*qkv(21)))


def test_library_errors_are_sdpa_error_and_value_error():
    q, k, v = qkv(22)
    with pytest.raises(sdpa.Error, match=r"^scale: must be finite"):
        sdpa.attention(q, k, v, scale=float("nan"))
    assert issubclass(sdpa.Error, ValueError)


@pytest.mark.parametrize("kwargs, exc, match", [
    (dict(causal="top_left"), ValueError, r"^causal: expected None, 'top-left'"),
    (dict(causal=True), ValueError, r"^causal:"),
    (dict(window=3), ValueError, r"^window: expected \(left, right\)"),
    (dict(window=(-2, 0)), ValueError, r"^window: left and right must be >= 0"),
    (dict(softcap=0.0), ValueError, r"^softcap: must be a finite value > 0"),
    (dict(threads=-1), ValueError, r"^threads: must be >= 0"),
    (dict(threads=1.5), TypeError, r"^threads:"),
    (dict(scale="big"), TypeError, r"^scale:"),
    (dict(mask=np.zeros((37, 53), np.int8)), TypeError, r"^mask: dtype int8 .*bool.*float32"),
    (dict(mask=np.zeros((37, 53), np.float64)), TypeError, r"^mask: dtype float64"),
    (dict(mask=np.zeros((37, 52), np.float32)), ValueError, r"^mask: shape \[1, 1, 37, 52\] does not broadcast"),
    (dict(mask=np.zeros((1, 1, 1, 37, 53), np.float32)), ValueError, r"^mask: shape .* rank 5"),
])
def test_option_errors_name_the_argument(kwargs, exc, match):
    with pytest.raises(exc, match=match):
        sdpa.attention(*qkv(23), **kwargs)


def test_misaligned_strides_are_refused():
    raw = np.zeros(2 * 4 * 37 * 16 * 4 + 2, dtype=np.uint8)
    odd = np.ndarray((2, 4, 37, 16), dtype=np.float32, buffer=raw, offset=0,
                     strides=(4 * 37 * 16 * 4 + 2, 37 * 16 * 4, 16 * 4, 4))  # batch stride 2 bytes off
    q, k, v = qkv(24)
    with pytest.raises(ValueError, match=r"^q: strides .* not a multiple of the element size 4"):
        sdpa.attention(odd, k, v)
    unaligned = np.ndarray((2, 4, 37, 16), dtype=np.float32, buffer=raw, offset=1)
    with pytest.raises(ValueError, match=r"^q: data is not aligned"):
        sdpa.attention(unaligned, k, v)


def test_backward_argument_errors():
    q, k, v = qkv(25)
    out, lse = sdpa.attention(q, k, v, return_lse=True)
    with pytest.raises(ValueError, match=r"^lse: rank 4"):
        sdpa.attention_backward(q, k, v, out, out, out)
    with pytest.raises(ValueError, match=r"^dout: shape"):
        sdpa.attention_backward(q, k, v, out, lse, out[:, :, :5])


# ---- the rest of the surface ------------------------------------------------------------

def test_isa():  # the version: test_package.py
    assert sdpa.active_isa() in {"scalar", "avx2", "avx512"}
    assert sdpa._ext.isa_supported("scalar")


def test_amx_bf16_active_follows_the_cpu_and_sdpa_amx():
    import os
    import platform
    import subprocess
    import sys
    flags = next((l for l in open("/proc/cpuinfo") if l.startswith("flags")), "").split()
    release = tuple(int(x) for x in platform.release().split("-")[0].split(".")[:2])
    # Linux grants the tile state on request from 5.16 on
    expected = (sdpa.active_isa() == "avx512" and {"amx_tile", "amx_bf16", "avx512_bf16"} <= set(flags)
                and release >= (5, 16) and os.environ.get("SDPA_AMX") != "0")
    assert sdpa.amx_bf16_active() is expected
    env = dict(os.environ, SDPA_AMX="0")
    off = subprocess.run([sys.executable, "-c", "import sdpa; print(sdpa.amx_bf16_active())"], env=env,
                         capture_output=True, text=True, check=True)
    assert off.stdout.strip() == "False"


def test_bf16_dot_active_follows_the_cpu_amx_and_sdpa_bf16_dot():
    import os
    import subprocess
    import sys
    flags = next((l for l in open("/proc/cpuinfo") if l.startswith("flags")), "").split()
    has_dot = sdpa.active_isa() == "avx512" and "avx512_bf16" in flags
    amd = "AuthenticAMD" in open("/proc/cpuinfo").read()
    want = os.environ.get("SDPA_BF16_DOT", "")
    expected = has_dot and not sdpa.amx_bf16_active() and want != "0" and (want == "1" or amd)
    assert sdpa.bf16_dot_active() is expected
    probe = [sys.executable, "-c", "import sdpa; print(sdpa.amx_bf16_active(), sdpa.bf16_dot_active())"]
    # AMX off and the dot products forced: they run wherever the CPU has them; turned off: never.
    amx_off = subprocess.run(probe, env=dict(os.environ, SDPA_AMX="0", SDPA_BF16_DOT="1"), capture_output=True,
                             text=True, check=True)
    assert amx_off.stdout.split() == ["False", str(has_dot)]
    both_off = subprocess.run(probe, env=dict(os.environ, SDPA_AMX="0", SDPA_BF16_DOT="0"), capture_output=True,
                              text=True, check=True)
    assert both_off.stdout.split() == ["False", "False"]


def test_dispatch_says_what_the_process_runs():
    d = sdpa.dispatch()
    assert d["isa"] == sdpa.active_isa()
    assert d["engine"] in {"widened", "amx", "dot"}
    if d["isa"] == "avx512":  # elsewhere the engine is the avx512 path's, which this process does not run
        assert (d["engine"] == "amx") is sdpa.amx_bf16_active() and (d["engine"] == "dot") is sdpa.bf16_dot_active()
    assert d["isa_reason"] and d["engine_reason"]


def test_release_buffers_frees_what_calls_kept_and_changes_nothing():
    rng = np.random.default_rng(5)
    q, k, v = rand(rng, (1, 4, 64, 64)), rand(rng, (1, 2, 700, 64)), rand(rng, (1, 2, 700, 64))
    want = sdpa.attention(q, k, v, threads=1)
    kept = sdpa.buffer_pool_bytes()
    assert kept["held"] > 0 and kept["busy"] == 0, kept
    assert sdpa.release_buffers() == kept["held"]
    assert sdpa.buffer_pool_bytes() == {"held": 0, "busy": 0}
    assert np.array_equal(sdpa.attention(q, k, v, threads=1), want)
    assert sdpa.buffer_pool_bytes()["held"] > 0


def test_explain_reports_the_loops_the_call_took():
    rng = np.random.default_rng(3)
    # Decoding: one query per head, 4 query heads on one kv head, 5000 keys: one item of 4 lanes, split in two.
    q, k, v = rand(rng, (1, 4, 1, 64)), rand(rng, (1, 1, 5000, 64)), rand(rng, (1, 1, 5000, 64))
    plan = sdpa.explain(q, k, v, threads=2)
    assert plan["call"] == "forward" and plan["isa"] == sdpa.active_isa() and plan["kv_splits"] == 2
    fused = sdpa.active_isa() != "scalar"
    assert (plan["decoding_items"], plan["few_lane_items"]) == ((2, 0) if fused else (0, 2)), plan
    assert plan["tiled_items"] == plan["engine_items"] == 0 and "split-KV x2" in plan["summary"]
    # Prefill: two heads of 130 rows: two full tiles and a 2-lane tail each.
    q, k, v = (rand(rng, (1, 2, 130, 32)) for _ in range(3))
    plan = sdpa.explain(q, k, v, causal="top-left", threads=1)
    assert plan["tiled_items"] == 4 and plan["engine"] == "widened" and plan["threads"] == 1, plan
    back = sdpa.explain(q, k, v, causal="top-left", threads=1, backward=True)
    assert back["call"] == "backward" and back["one_pass"] is True and back["backward_items"] == 2, back
    with pytest.raises(ValueError, match="^q: rank"):
        sdpa.explain(q[0], k[0], v[0])


def test_check_is_the_main_job_in_process():
    # `sdpa check` (bench::check): timed, against the measured peak, judged against fp64 by the rule.
    r = sdpa.check(heads=2, kv_heads=1, seq=70, kv_seq=90, dim=16, dim_v=24, causal="bottom-right", repeat=1,
                   min_seconds=0.0, threads=1)
    assert r["pass"] is True and [c["tensor"] for c in r["checks"]] == ["out", "lse", "dq", "dk", "dv"]
    assert all(c["pass"] and c["err_fast"] <= c["bound"] for c in r["checks"]), r["checks"]
    assert (r["heads"], r["kv_heads"], r["seq"], r["kv_seq"], r["dim"], r["dim_v"]) == (2, 1, 70, 90, 16, 24)
    assert r["isa"] == sdpa.active_isa() and r["causal"] == "bottom-right" and r["peak_gflops"] > 0
    assert r["forward_runs"] >= 1 and r["backward_runs"] >= 1 and r["forward_gflops"] > 0
    assert sdpa.check(seq=40, heads=1, dim=8, backward=False, repeat=1, min_seconds=0.0)["backward_runs"] == 0
    with pytest.raises(ValueError, match="^kv_heads: 3 does not divide heads 2"):
        sdpa.check(heads=2, kv_heads=3)
    with pytest.raises(ValueError, match="^causal"):
        sdpa.check(causal="upper")
    # The timer's limits are the library's (bench::TimerRule), named as this function names them.
    with pytest.raises(sdpa.Error, match="^repeat: must be >= 1, got 0"):
        sdpa.check(seq=8, heads=1, dim=8, repeat=0)
    with pytest.raises(sdpa.Error, match="^max_runs: must be >= 1"):
        sdpa.check(seq=8, heads=1, dim=8, max_runs=0)


def test_import_does_not_need_torch():
    import subprocess
    import sys

    code = "import sys, sdpa; assert 'torch' not in sys.modules; print(sdpa.__version__)"
    subprocess.run([sys.executable, "-c", code], check=True)
    # And sdpa.torch says what is missing when torch cannot be imported.
    code = ("import sys; sys.modules['torch'] = None; import sdpa\n"
            "try:\n    import sdpa.torch\nexcept ImportError as e:\n    print(e)\n    assert 'needs PyTorch' in str(e)\n"
            "else:\n    raise SystemExit('no ImportError')")
    subprocess.run([sys.executable, "-c", code], check=True)

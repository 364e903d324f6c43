"""sdpa.attention_with_kvcache (a KV cache, contiguous or paged, new tokens appended in place) against the float64
NumPy oracle on each sequence's keys under the project's rule (npref.py), its bits against sdpa.attention on the
sequence, errors naming the argument with the cache left unchanged; and sdpa.transformers.GrowingCache in
generate()."""

import numpy as np
import pytest

import sdpa
from npref import assert_within, attention_ref, forward_floors

HELD = [0, 5, 37, 100]  # tokens per sequence before the call
HQ, HKV, DK, DV, CAP, BLOCK = 8, 2, 32, 24, 112, 16


def make(seed, nq, nnew, paged):
    rng = np.random.default_rng(seed)
    B = len(HELD)
    outer = (B * (CAP // BLOCK) + 3, BLOCK) if paged else (B, CAP)
    q = rng.standard_normal((B, nq, HQ, DK)).astype(np.float32)
    kc = rng.standard_normal(outer + (HKV, DK)).astype(np.float32)
    vc = rng.standard_normal(outer + (HKV, DV)).astype(np.float32)
    kn = rng.standard_normal((B, nnew, HKV, DK)).astype(np.float32)
    vn = rng.standard_normal((B, nnew, HKV, DV)).astype(np.float32)
    table = rng.permutation(outer[0])[:B * (CAP // BLOCK)].reshape(B, CAP // BLOCK).astype(np.int32) if paged else None
    return q, kc, vc, kn, vn, table


def rows(cache, table, b, n):
    """Sequence b's first n positions of a cache, [n, H, D]."""
    if table is None:
        return cache[b, :n]
    pos = np.arange(n)
    return cache[table[b, pos // BLOCK], pos % BLOCK]


@pytest.mark.parametrize("paged", [False, True], ids=["contiguous", "paged"])
@pytest.mark.parametrize("nq,causal,opts", [(1, False, {}), (3, True, {}), (3, True, {"window": (20, 0), "softcap": 3.0}),
                                           (2, True, {"sinks": np.array([0.5, -1, 2, -np.inf, 0, 1.5, -0.5, 3],
                                                                        np.float32), "scale": 0.3})],
                         ids=["decode", "chunk_causal", "window_softcap", "sinks"])
def test_against_the_reference_and_attention_on_each_sequence(paged, nq, causal, opts):
    q, kc, vc, kn, vn, table = make(7, nq, nq, paged)
    kc0, vc0 = kc.copy(), vc.copy()
    out, lse = sdpa.attention_with_kvcache(q, kc, vc, kn, vn, cache_seqlens=np.array(HELD, np.int32),
                                           block_table=table, causal=causal, return_lse=True, **opts)
    assert out.shape == (len(HELD), nq, HQ, DV) and lse.shape == (len(HELD), HQ, nq)
    for b, held in enumerate(HELD):
        # the append: exactly the new rows, written where the sequence's next positions are
        np.testing.assert_array_equal(rows(kc, table, b, held + nq)[held:], kn[b])
        np.testing.assert_array_equal(rows(vc, table, b, held + nq)[held:], vn[b])
        np.testing.assert_array_equal(rows(kc, table, b, held), rows(kc0, table, b, held))
        k = rows(kc, table, b, held + nq).transpose(1, 0, 2)[None]
        v = rows(vc, table, b, held + nq).transpose(1, 0, 2)[None]
        qb = q[b].transpose(1, 0, 2)[None]
        ref_opts = dict(opts, causal="bottom-right" if causal else None)
        gold_out, gold_lse, _ = attention_ref(qb, k, v, **ref_opts)
        naive_out, naive_lse, _ = attention_ref(qb, k, v, dtype=np.float32, **ref_opts)
        fo, fl = forward_floors(qb, k, v, gold_lse, **ref_opts)
        got_out, got_lse = out[b].transpose(1, 0, 2)[None], lse[b][None]
        assert_within(f"out[{b}]", got_out, naive_out, gold_out, fo)
        assert_within(f"lse[{b}]", got_lse, naive_lse, gold_lse, fl)
        # the same bits as sdpa.attention on the sequence's keys (each sequence is one such call)
        want_out, want_lse = sdpa.attention(np.ascontiguousarray(qb), np.ascontiguousarray(k),
                                            np.ascontiguousarray(v), return_lse=True, **ref_opts)
        np.testing.assert_array_equal(got_out, want_out)
        np.testing.assert_array_equal(got_lse, want_lse)
    touched = np.zeros(kc.shape[:2], bool)  # no other cache row changed
    for b, held in enumerate(HELD):
        for p in range(held, held + nq):
            touched[(b, p) if table is None else (table[b, p // BLOCK], p % BLOCK)] = True
    np.testing.assert_array_equal(kc[~touched], kc0[~touched])
    np.testing.assert_array_equal(vc[~touched], vc0[~touched])


def test_without_new_tokens_reads_the_held_keys_and_threads_do_not_change_bits():
    q, kc, vc, _, _, table = make(3, 1, 0, True)
    kc0 = kc.copy()
    seqlens = np.array(HELD, np.int64)  # int64 is narrowed
    one = sdpa.attention_with_kvcache(q, kc, vc, cache_seqlens=seqlens, block_table=table, threads=1)
    for t in (2, 5):
        np.testing.assert_array_equal(
            sdpa.attention_with_kvcache(q, kc, vc, cache_seqlens=seqlens, block_table=table, threads=t), one)
    np.testing.assert_array_equal(kc, kc0)
    np.testing.assert_array_equal(one[0], 0)  # sequence 0 holds no key: the empty row


@pytest.mark.parametrize("paged", [False, True], ids=["contiguous", "paged"])
def test_a_heads_major_view_gives_the_bits_of_flashattentions_order(paged):
    # A buffer keeping each head's rows together, [A, Hkv, R, D], seen as the [A, R, Hkv, D] cache; one sequence long
    # enough to be cut into key splits. Same appended rows, same bits as the tokens-major copy, for any thread count.
    rng = np.random.default_rng(11)
    held, rows_per = [4500, 37], 4608
    outer = (2 * rows_per // BLOCK, BLOCK) if paged else (2, rows_per)
    kbuf = rng.standard_normal((outer[0], HKV, outer[1], DK)).astype(np.float32)
    vbuf = rng.standard_normal((outer[0], HKV, outer[1], DV)).astype(np.float32)
    table = rng.permutation(outer[0]).reshape(2, rows_per // BLOCK).astype(np.int32) if paged else None
    q = rng.standard_normal((2, 1, HQ, DK)).astype(np.float32)
    kn = rng.standard_normal((2, 1, HKV, DK)).astype(np.float32)
    vn = rng.standard_normal((2, 1, HKV, DV)).astype(np.float32)
    kc, vc = kbuf.transpose(0, 2, 1, 3), vbuf.transpose(0, 2, 1, 3)  # views: written through
    kt, vt = np.ascontiguousarray(kc), np.ascontiguousarray(vc)
    call = dict(cache_seqlens=np.array(held, np.int32), block_table=table)
    want = sdpa.attention_with_kvcache(q, kt, vt, kn, vn, threads=1, **call)
    got = sdpa.attention_with_kvcache(q, kc, vc, kn, vn, threads=2, **call)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(kbuf.transpose(0, 2, 1, 3), kt)  # the same rows appended, nothing else
    np.testing.assert_array_equal(vbuf.transpose(0, 2, 1, 3), vt)
    np.testing.assert_array_equal(rows(kc, table, 0, held[0] + 1)[held[0]:], kn[0])
    call["cache_seqlens"] = np.array(held, np.int32) + 1  # read again without new tokens, on 3 threads
    np.testing.assert_array_equal(sdpa.attention_with_kvcache(q, kc, vc, threads=3, **call), want)


def test_a_read_only_cache_is_named():
    q, kc, vc, _, _, _ = make(4, 1, 0, False)
    vc.flags.writeable = False
    with pytest.raises(ValueError, match="^v_cache: read-only"):
        sdpa.attention_with_kvcache(q, kc, vc, cache_seqlens=3)


def test_torch_bfloat16_and_the_grad_refusal():
    torch = pytest.importorskip("torch")
    q, kc, vc, kn, vn, _ = (torch.from_numpy(x) if x is not None else None for x in make(5, 1, 1, False))
    q, kc, vc, kn, vn = (x.bfloat16() for x in (q, kc, vc, kn, vn))
    lens = torch.tensor(HELD, dtype=torch.int32)
    with torch.no_grad():
        out = sdpa.attention_with_kvcache(q, kc, vc, kn, vn, cache_seqlens=lens, causal=True)
    assert out.dtype == torch.bfloat16 and out.shape == (4, 1, HQ, DV)
    for b, held in enumerate(HELD):
        assert torch.equal(kc[b, held], kn[b, 0])
        want = sdpa.attention(q[b:b + 1].transpose(1, 2), kc[b:b + 1, :held + 1].transpose(1, 2),
                              vc[b:b + 1, :held + 1].transpose(1, 2), causal="bottom-right")
        assert torch.equal(out[b:b + 1].transpose(1, 2), want)
    with pytest.raises(ValueError, match="no backward"):
        sdpa.attention_with_kvcache(q.float().requires_grad_(), kc.float(), vc.float(), cache_seqlens=lens)


@pytest.mark.parametrize("change,match", [
    (lambda a: a.update(block_table=np.where(a["block_table"] == a["block_table"][2, 1], 99, a["block_table"])),
     r"block_table: entry \[2, 1\]"),
    (lambda a: a.update(cache_seqlens=np.array([0, 5, 37, 112], np.int32)), r"cache_seqlens: entry 3"),
    (lambda a: a.update(cache_seqlens=np.array([0, 5, 37], np.int32)), r"cache_seqlens: shape"),
    (lambda a: a.update(cache_seqlens=np.array(HELD, np.float32)), r"cache_seqlens: dtype"),
    (lambda a: a.update(v=None), r"^v: missing"),
    (lambda a: a.update(causal="bottom-right"), r"causal: expected a bool"),
    (lambda a: a.update(block_table=a["block_table"][:3]), r"block_table: shape"),
    (lambda a: a.update(k=a["k"][:, :, :1]), r"^k: shape"),
])
def test_bad_arguments_leave_the_cache_unchanged(change, match):
    q, kc, vc, kn, vn, table = make(9, 1, 1, True)
    args = dict(k=kn, v=vn, cache_seqlens=np.array(HELD, np.int32), block_table=table, causal=True)
    change(args)
    kc0, vc0 = kc.copy(), vc.copy()
    with pytest.raises((ValueError, TypeError), match=match):
        sdpa.attention_with_kvcache(q, kc, vc, **args)
    np.testing.assert_array_equal(kc, kc0)
    np.testing.assert_array_equal(vc, vc0)


# ---- quantized caches (sdpa.quantize_kv, sdpa.QuantizedKV) -------------------------------------------------------

@pytest.mark.parametrize("fmt", ["int8", "fp8_e4m3"])
def test_quantize_kv_round_trips_within_half_a_step(fmt):
    rng = np.random.default_rng(1)
    x = rng.standard_normal((3, 7, 2, 40)).astype(np.float32)
    x[0, 0, 0] = 0.0  # an all-zero row: scale 0, codes 0
    qx = sdpa.quantize_kv(x, fmt)
    assert qx.codes.dtype == np.uint8 and qx.codes.shape == x.shape and qx.scales.shape == (3, 2, 7)
    assert qx.nbytes == x.size + 4 * 3 * 2 * 7
    back = qx.dequantize()
    absmax = np.abs(x).max(axis=3).transpose(0, 2, 1)  # [A, H, R]
    top = 127.0 if fmt == "int8" else 448.0
    np.testing.assert_array_equal(qx.scales, (absmax / np.float32(top)).astype(np.float32))
    s = qx.scales.transpose(0, 2, 1)[..., None].astype(np.float64)  # per row, broadcast over D
    bound = s / 2 if fmt == "int8" else np.maximum(np.abs(x) / 16.0, s / 1024.0)
    err = np.abs(back.astype(np.float64) - x)
    assert np.all(err <= bound * (1 + 1e-6) + 2.0 ** -24 * absmax.transpose(0, 2, 1)[..., None])
    assert qx.scales[0, 0, 0] == 0 and not qx.codes[0, 0, 0].any()
    bad = x.copy()
    bad[1, 2, 1, 3] = np.nan
    with pytest.raises(sdpa.Error, match=r"x: element \[1, 2, 1, 3\] is nan"):
        sdpa.quantize_kv(bad, fmt)
    with pytest.raises(ValueError, match="format"):
        sdpa.quantize_kv(x, "int4")


@pytest.mark.parametrize("fmt", ["int8", "fp8_e4m3"])
def test_quantize_kv_reads_float16_and_strided_arrays_as_their_float32_values(fmt):
    """NumPy float16 and float32 in any strides (negative ones too) get the codes and scales of the same values
    contiguous in float32: the kernel widens a row at a time (exactly) instead of a float32 copy of x."""
    x = np.random.default_rng(4).standard_normal((2, 3, 9, 64)).astype(np.float32).transpose(0, 2, 1, 3)  # [A, R, H, D]
    for view in (x, x.astype(np.float16), x[:, ::-1], x[..., ::2].astype(np.float16)):
        want = sdpa.quantize_kv(np.ascontiguousarray(view, dtype=np.float32), fmt)
        got = sdpa.quantize_kv(view, fmt)
        np.testing.assert_array_equal(got.codes, want.codes)
        np.testing.assert_array_equal(got.scales, want.scales)
    bad = x.astype(np.float16)
    bad[1, 4, 2, 5] = np.nan
    with pytest.raises(sdpa.Error, match=r"x: element \[1, 4, 2, 5\] is nan"):
        sdpa.quantize_kv(bad, fmt)


@pytest.mark.parametrize("fmt", ["int8", "fp8_e4m3"])
def test_quantize_kv_reads_torch_16_bit_tensors_as_their_float_values(fmt):
    """torch bfloat16 and float16 (strided or not) get the codes and scales of their float32 values; float64 goes
    through float32 as before. A NaN in a bfloat16 view is named by its index in the view."""
    torch = pytest.importorskip("torch")
    x = torch.randn(2, 3, 9, 64, generator=torch.Generator().manual_seed(4)).transpose(1, 2)  # [A, R, H, D], strided
    for dt in (torch.bfloat16, torch.float16, torch.float32, torch.float64):
        xs = x.to(dt)
        want = sdpa.quantize_kv(xs.float().contiguous(), fmt)
        for view in (xs, xs.contiguous()):
            got = sdpa.quantize_kv(view, fmt)
            assert torch.equal(got.codes, want.codes) and torch.equal(got.scales, want.scales), (dt, view.stride())
    bad = x.to(torch.bfloat16)
    bad[1, 4, 2, 5] = float("nan")
    with pytest.raises(sdpa.Error, match=r"x: element \[1, 4, 2, 5\] is nan"):
        sdpa.quantize_kv(bad, fmt)


@pytest.mark.parametrize("fmt", ["int8", "fp8_e4m3"])
@pytest.mark.parametrize("paged", [False, True], ids=["contiguous", "paged"])
@pytest.mark.parametrize("nq,causal", [(1, False), (3, True)], ids=["decode", "chunk_causal"])
def test_quantized_cache_is_the_attention_of_its_dequantized_values(fmt, paged, nq, causal):
    """Per sequence: the rule against the fp64 oracle on the dequantized keys (the new tokens as quantize_kv
    quantizes them), and the codes and scales written where the new tokens go. chunk_causal has 12 query lanes
    per kv head: the tiled loop reads the codes; decode: the fused decoding loop does."""
    q, kc, vc, kn, vn, table = make(11, nq, nq, paged)
    kq, vq = sdpa.quantize_kv(kc, fmt), sdpa.quantize_kv(vc, fmt)
    kc0, ks0 = kq.codes.copy(), kq.scales.copy()
    out, lse = sdpa.attention_with_kvcache(q, kq, vq, kn, vn, cache_seqlens=np.array(HELD, np.int32),
                                           block_table=table, causal=causal, return_lse=True)
    kn_q, vn_q = sdpa.quantize_kv(kn, fmt), sdpa.quantize_kv(vn, fmt)
    kd, vd = kq.dequantize(), vq.dequantize()
    for b, held in enumerate(HELD):
        pos = np.arange(held, held + nq)
        idx = (b, pos) if table is None else (table[b, pos // BLOCK], pos % BLOCK)
        np.testing.assert_array_equal(kq.codes[idx], kn_q.codes[b])
        np.testing.assert_array_equal(kq.scales[idx[0], :, idx[1]], kn_q.scales[b].T)
        np.testing.assert_array_equal(vq.codes[idx], vn_q.codes[b])
        k = rows(kd, table, b, held + nq).transpose(1, 0, 2)[None]
        v = rows(vd, table, b, held + nq).transpose(1, 0, 2)[None]
        qb = q[b].transpose(1, 0, 2)[None]
        ref_opts = {"causal": "bottom-right" if causal else None}
        gold_out, gold_lse, _ = attention_ref(qb, k, v, **ref_opts)
        naive_out, naive_lse, _ = attention_ref(qb, k, v, dtype=np.float32, **ref_opts)
        fo, fl = forward_floors(qb, k, v, gold_lse, **ref_opts)
        assert_within(f"out[{b}]", out[b].transpose(1, 0, 2)[None], naive_out, gold_out, fo)
        assert_within(f"lse[{b}]", lse[b][None], naive_lse, gold_lse, fl)
    touched = np.zeros(kq.codes.shape[:2], bool)
    for b, held in enumerate(HELD):
        for p in range(held, held + nq):
            touched[(b, p) if table is None else (table[b, p // BLOCK], p % BLOCK)] = True
    np.testing.assert_array_equal(kq.codes[~touched], kc0[~touched])
    np.testing.assert_array_equal(kq.scales.transpose(0, 2, 1)[~touched], ks0.transpose(0, 2, 1)[~touched])


def test_quantized_cache_with_torch_and_bf16_queries():
    torch = pytest.importorskip("torch")
    q, kc, vc, kn, vn, _ = make(5, 1, 1, False)
    kq = sdpa.quantize_kv(torch.from_numpy(kc), "int8")
    vq = sdpa.quantize_kv(torch.from_numpy(vc).to(torch.bfloat16), "int8")  # any float dtype goes in
    assert kq.codes.dtype == torch.uint8 and isinstance(kq.dequantize(), torch.Tensor)
    qt = torch.from_numpy(q).to(torch.bfloat16)
    out = sdpa.attention_with_kvcache(qt, kq, vq, torch.from_numpy(kn).to(torch.bfloat16),
                                      torch.from_numpy(vn).to(torch.bfloat16), cache_seqlens=torch.tensor(HELD))
    assert out.dtype == torch.bfloat16 and out.shape == (len(HELD), 1, HQ, DV)
    # against the float path on the dequantized cache (the new rows quantized as the call quantized them)
    for b, held in enumerate(HELD):
        k = kq.dequantize()[b, :held + 1].permute(1, 0, 2)[None].double()
        v = vq.dequantize()[b, :held + 1].permute(1, 0, 2)[None].double()
        gold = torch.nn.functional.scaled_dot_product_attention(
            qt[b].permute(1, 0, 2)[None].double(), k.repeat_interleave(HQ // HKV, 1), v.repeat_interleave(HQ // HKV, 1))
        got = out[b].permute(1, 0, 2)[None].double()
        assert (got - gold).abs().max().item() <= 2.0 ** -8 * gold.abs().max().item() + 1e-6  # bf16 output rounding


def test_quantized_cache_errors_leave_it_unchanged():
    q, kc, vc, kn, vn, table = make(2, 1, 1, True)
    kq, vq = sdpa.quantize_kv(kc, "int8"), sdpa.quantize_kv(vc, "int8")
    k0, s0 = kq.codes.copy(), kq.scales.copy()
    bad = kn.copy()
    bad[2, 0, 1, 3] = np.inf
    with pytest.raises(sdpa.Error, match=r"^k: element \[2, 0, 1, 3\] is inf"):
        sdpa.attention_with_kvcache(q, kq, vq, bad, vn, cache_seqlens=np.array(HELD, np.int32), block_table=table)
    np.testing.assert_array_equal(kq.codes, k0)
    np.testing.assert_array_equal(kq.scales, s0)
    with pytest.raises(TypeError, match="both QuantizedKV"):
        sdpa.attention_with_kvcache(q, kq, vc, cache_seqlens=np.array(HELD, np.int32), block_table=table)
    with pytest.raises(ValueError, match="format"):
        sdpa.attention_with_kvcache(q, kq, sdpa.quantize_kv(vc, "fp8_e4m3"), cache_seqlens=np.array(HELD, np.int32),
                                    block_table=table)

"""The public functions of sdpa (sdpa.attention, attention_varlen, attention_backward, explain, check, ...): the
front that picks the route of a call. NumPy arrays and tensors that need no autograd go to the kernel through
sdpa._core; a tensor call that needs gradients, or that something traces, goes through the custom ops of
sdpa._ops, imported then (torch is importable: q is a tensor). _core imports neither; _ops imports _core only.
"""

from __future__ import annotations

import functools
import json

from . import _core, _ext
from ._core import (_CAUSAL, _backward4, _check_float32, _check_layout, _check_offsets, _check_rank,
                    _check_tensors, _empty, _empty_like, _fast_args, _fast_masks, _forward4, _forward_varlen, _from4,
                    _is_int, _is_real, _kind, _options, _to4, _torch_route, with_options)


def _attention(q, k, v, options: dict, *, return_lse: bool = False, kernel: str = "fast", kind=None,
               caller: str = "attention"):
    """kind: q, k, v's kind when the caller has already run _check_tensors on them under its own argument names
    (sdpa.torch's drop-in), so a small call does not pay for the checks twice."""
    if kind is None:
        kind = _check_tensors({"q": q, "k": k, "v": v}, "q", half_ok=True)
    opts = _options(options, kernel=kernel, kind=kind, caller=caller)
    q4, k4, v4 = _to4(q), _to4(k), _to4(v)
    route = _torch_route(q, k, v, options.get("mask"), options.get("sinks")) if kind == "torch" else "direct"
    if route == "direct":
        out4, lse4 = _forward4(kind, q4, k4, v4, opts, with_lse=return_lse)
    else:  # autograd; the custom op sdpa::forward for torch.compile, export
        from . import _ops
        out4, lse4 = _ops.forward(q4, k4, v4, opts, traced=route == "op")
    out = _from4(out4, q.ndim)
    if return_lse:
        return out, _from4(lse4, q.ndim - 1, 3)
    return out


@with_options()
def attention(q, k, v, *, return_lse=False, **options):
    """Exact scaled dot-product attention, ``softmax(scale * q @ k^T + mask) @ v``, by the fast kernel.

    q: [B, Hq, Nq, Dk], k: [B, Hkv, Nk, Dk], v: [B, Hkv, Nk, Dv] — NumPy arrays or PyTorch CPU
    tensors (all the same kind), float32, float16 or (torch) bfloat16, one dtype for all; any strides:
    a transposed view of a [B, N, H, D] buffer is
    read in place, never copied. [H, N, D] and [N, D] are accepted too. Hq % Hkv == 0 gives
    grouped-query attention (query head h reads kv head h // (Hq // Hkv)).

    scale:   the temperature beta (default 1/sqrt(Dk)); any finite value.
    causal:  None, 'top-left' (key j visible to query i iff j <= i; PyTorch's is_causal) or
             'bottom-right' (j <= i + Nk - Nq; a KV cache).
    window:  (left, right): key j visible iff d_i - left <= j <= d_i + right around query i's
             diagonal d_i; -1 or None leaves a side unbounded.
    softcap: c > 0 turns scores s into c * tanh(s / c).
    mask:    the same kind as q; bool (True keeps a key, as in PyTorch) or float (added to the scores;
             -inf masks; a float16/bfloat16 mask is widened to float32, a copy of the mask only),
             broadcast NumPy-style to [B, Hq, Nq, Nk] (size-1 dimensions are read with stride 0).
    sinks:   attention sinks (gpt-oss): [Hq] float32, the same kind as q, one logit per query head in
             the units of the scores; each joins its head's rows' softmax as a key with no value
             (-inf: no sink on that head). lse includes it; a query that sees no key puts all its
             weight on the sink (out 0, lse the sink). A tensor that requires grad gets its gradient.
    return_lse: also return the log-sum-exp of each query's scores, shaped like out without its
             last dimension (-inf for a query that sees no key; such a query's output is 0).
    threads: None or 0 for all available; the result is the same for any count.
    dropout_p: attention dropout (PyTorch's dropout_p): each probability dropped with probability
             dropout_p, the kept ones scaled by 1/(1 - dropout_p); lse stays the undropped one.
             The mask is a function of (dropout_seed, dropout_offset) and the position (Philox;
             docs/contract.md, "Dropout"), so the backward regenerates it. dropout_seed None:
             drawn from torch's default generator for tensors (torch.manual_seed repeats a run),
             required for NumPy arrays.

    Returns out [B, Hq, Nq, Dv] in q's dtype (and lse [B, Hq, Nq], always float32) in the caller's
    array type. 16-bit inputs are widened on load, every product is accumulated in float32 and out
    is rounded once. With PyTorch tensors that require grad, the result is differentiable (the
    library's backward runs; gradients in the inputs' dtype).
    Raises TypeError for a wrong type or dtype (float64 is not downcast: convert with
    .astype(numpy.float32) or .float()) or for mixed dtypes, ValueError (sdpa.Error) for wrong
    shapes, devices, strides or options, each naming the argument.
    """
    return _attention(q, k, v, options, return_lse=return_lse)


@with_options()
def reference_attention(q, k, v, *, return_lse=False, **options):
    """sdpa.attention computed by the readable reference kernel: it materialises each head's score
    matrix and accumulates in float64 (results in the inputs' dtype: float32, or 16-bit inputs widened
    and the results rounded once). The oracle the fast kernel is tested
    against; slow and O(Nq * Nk) memory per head. Same arguments and results as sdpa.attention."""
    return _attention(q, k, v, options, return_lse=return_lse, kernel="reference", caller="reference_attention")


@with_options()
def attention_backward(q, k, v, out, lse, dout, **options):
    """Gradients (dq, dk, dv) of a loss whose gradient with respect to out is dout; with sinks, (dq, dk, dv,
    dsinks), dsinks [Hq] float32.

    out and lse must be what sdpa.attention(..., return_lse=True) returned for the same q, k, v and
    options (with dropout: the same dropout_p, dropout_seed and dropout_offset, which regenerate the
    forward's mask). Arrays as in sdpa.attention (same kind, one dtype of float32, float16, bfloat16,
    any strides; lse float32); dq, dk, dv have the dtype and shapes of q, k, v (and their memory
    order, where dense). dk and dv sum over the query heads of a group.
    Deterministic: the same bits for any thread count.
    """
    kind = _check_tensors({"q": q, "k": k, "v": v, "out": out, "dout": dout}, "q", half_ok=True)
    if _kind("lse", lse) != kind:
        raise TypeError("lse: not the same kind of array as q; pass what sdpa.attention returned")
    _check_layout("lse", lse, kind)
    _check_float32("lse", lse, kind)
    _check_rank("lse", lse, q.ndim - 1)
    opts = _options(options, kind=kind, seed="later", caller="attention_backward")
    if opts["dropout_p"] and options.get("dropout_seed") is None:
        raise ValueError("dropout_seed: required with dropout_p > 0 (the seed the forward used)")
    dq, dk, dv, dsinks = _backward4(kind, _to4(q), _to4(k), _to4(v), _to4(out), _to4(lse, 3), _to4(dout), opts)
    grads = _from4(dq, q.ndim), _from4(dk, q.ndim), _from4(dv, q.ndim)
    return grads if dsinks is None else grads + (dsinks,)

@with_options()
def attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, *, return_lse=False, **options):
    """Attention over a packed batch of sequences of different lengths (FlashAttention's varlen).

    q: [Tq, Hq, Dk], k: [Tk, Hkv, Dk], v: [Tk, Hkv, Dv] hold the sequences back to back; sequence s
    is rows cu_seqlens_q[s]:cu_seqlens_q[s+1] of q and cu_seqlens_k[s]:cu_seqlens_k[s+1] of k and v.
    The offsets (int32 or int64, batch + 1 of them) start at 0, never decrease and end at Tq (Tk).
    Each sequence attends only within itself, with causal, window, scale and softcap as in
    sdpa.attention applied per sequence; nothing is padded. NumPy arrays or PyTorch CPU tensors,
    float32, float16 or (torch) bfloat16, one dtype for q, k and v (16-bit ones widened on load,
    accumulated in float32, out rounded once; lse float32); with tensors that require grad the
    result is differentiable in q, k and v (gradients in the inputs' dtype). dropout_p,
    dropout_seed, dropout_offset as in sdpa.attention; sequence s draws the mask batch s would draw
    padded into one [batch, H, L, D] call.

    mask: the packed batch's, rank 3, broadcast to [Hq, Tq, Tk] (each dimension 1 or full): bool
    (True keeps a key) or float (added to the scores; -inf masks; float16/bfloat16 widened to
    float32, a copy of the mask only). Sequence s reads its rows cu_seqlens_q[s]:cu_seqlens_q[s+1]
    and columns cu_seqlens_k[s]:cu_seqlens_k[s+1] (a view, no copy), so a key-padding mask
    [1, 1, Tk] costs O(Tk); entries outside every sequence's block are never read. No gradient
    flows to the mask.

    Returns out [Tq, Hq, Dv] in q's dtype (and lse [Hq, Tq] with return_lse). A sequence with no
    keys gets out = 0 and lse = -inf. Raises TypeError / ValueError (sdpa.Error) naming the argument
    (TypeError for mixed dtypes).
    """
    kind = _check_tensors({"q": q, "k": k, "v": v}, "q", half_ok=True)
    for name, x in (("q", q), ("k", k), ("v", v)):
        if x.ndim != 3:
            raise ValueError(f"{name}: shape {tuple(x.shape)} has rank {x.ndim}; packed sequences are [T, H, D]")
    _check_offsets("cu_seqlens_q", cu_seqlens_q, kind)
    _check_offsets("cu_seqlens_k", cu_seqlens_k, kind)
    if cu_seqlens_q.dtype != cu_seqlens_k.dtype:
        raise TypeError(f"cu_seqlens_k: dtype {cu_seqlens_k.dtype} differs from cu_seqlens_q's "
                        f"{cu_seqlens_q.dtype}; give both int32 or both int64")
    opts = _options(options, kind=kind, packed_mask=True, caller="attention_varlen")
    if kind == "torch" and _torch_route(q, k, v, cu_seqlens_q, cu_seqlens_k, options.get("mask"),
                                        options.get("sinks")) != "direct":
        # through the custom op sdpa::forward_varlen: autograd, torch.compile, torch.export
        from . import _ops
        out, lse = _ops.forward_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, opts)
    else:
        out, lse = _forward_varlen(kind, q, k, v, cu_seqlens_q, cu_seqlens_k, opts)
    return (out, lse) if return_lse else out


@with_options()
def explain(q, k, v, *, backward=False, **options) -> dict:
    """Runs sdpa.attention(q, k, v, ...) (q, k, v [B, H, N, D], NumPy or torch CPU) and returns what the call
    ran, sdpa::Plan as a dict: 'isa', 'engine' (what ran the 16-bit products: 'widened', 'amx' or 'dot'),
    the forward's items per loop ('decoding_items', 'few_lane_items', 'tiled_items', 'engine_items'),
    'kv_splits' (> 1: split-KV), 'heads_per_item' (> 1: a tokens-major k and v's kv heads read together),
    'strided_copies', 'packed_operands', 'threads', 'why' (the dispatch's
    reasons) and 'summary' (one line). backward=True runs the forward, then the backward of a dout of ones,
    and returns the backward's plan ('one_pass' or two passes, 'backward_items', and 'engine_items': those
    whose products ran on the engine). The environment
    variable SDPA_LOG=1 prints the same summary to stderr for every call instead."""
    kind = _check_tensors({"q": q, "k": k, "v": v}, "q", half_ok=True)
    for name, x in (("q", q), ("k", k), ("v", v)):
        _check_rank(name, x, 4)
    opts = _options(options, kind=kind, caller="explain")
    B, Hq, Nq, _ = q.shape
    out = _empty(kind, (B, Hq, Nq, v.shape[3]), q.dtype)
    lse = _empty(kind, (B, Hq, Nq))
    plan = _ext.forward(*_fast_args(kind, q, k, v, out, lse), **_fast_masks(kind, opts), explain=True)
    if not backward:
        return plan
    dout = _empty_like(kind, out)
    dout[...] = 1
    dq, dk, dv = _empty_like(kind, q), _empty_like(kind, k), _empty_like(kind, v)
    return _ext.backward(*_fast_args(kind, q, k, v, out, lse, dout, dq, dk, dv), **_fast_masks(kind, opts),
                         explain=True)


def active_isa() -> str:
    """The instruction set the fast kernel uses in this process: 'avx512', 'avx2' or 'scalar' on
    x86-64, 'sve', 'neon' or 'scalar' on aarch64 (the SDPA_ISA environment variable forces one)."""
    return _ext.active_isa()


def check(*, batch=1, heads=8, kv_heads=None, seq=1024, kv_seq=None, dim=64, dim_v=None, causal=None,
          threads=None, seed=1, backward=True, isa="auto", repeat=5, min_seconds=0.3, max_runs=200) -> dict:
    """`sdpa check`, the main job, in this process: attention forward (and backward) on seeded standard
    normal inputs of [batch, heads, seq, dim] (kv_heads, kv_seq, dim_v: None for the same as heads, seq,
    dim), timed (median of at least `repeat` runs after a warm-up, and at least min_seconds, at most
    max_runs) against the fp32 FMA peak measured in the same run, and checked against the fp64
    reference by the project's rule. Returns `sdpa check --format json`'s dict: the timings and GFLOP/s,
    'peak_gflops' and the fractions of it, 'peak_rss_mib', 'checks' (per tensor: err_fast,
    err_naive_fp32, bound, pass), 'note' and 'pass'."""
    values = {"batch": batch, "heads": heads, "kv_heads": heads if kv_heads is None else kv_heads, "seq": seq,
              "kv_seq": seq if kv_seq is None else kv_seq, "dim": dim, "dim_v": dim if dim_v is None else dim_v,
              "threads": 0 if threads is None else threads, "seed": seed, "repeat": repeat, "max_runs": max_runs}
    for name, val in values.items():
        if not _is_int(val):
            raise TypeError(f"{name}: expected an int, got {val!r}")
    for name in ("batch", "heads", "kv_heads", "seq", "kv_seq", "dim", "dim_v"):
        if values[name] < 1:
            raise ValueError(f"{name}: must be >= 1, got {values[name]}")
    if values["heads"] % values["kv_heads"]:
        raise ValueError(f"kv_heads: {values['kv_heads']} does not divide heads {values['heads']}")
    if not isinstance(causal, (str, type(None))) or causal not in _CAUSAL:
        raise ValueError(f"causal: expected None, 'top-left' or 'bottom-right', got {causal!r}")
    if not _is_real(min_seconds):
        raise TypeError(f"min_seconds: expected a real number, got {min_seconds!r}")
    try:
        return json.loads(_ext.check(values["batch"], values["heads"], values["kv_heads"], values["seq"],
                                     values["kv_seq"], values["dim"], values["dim_v"], _CAUSAL[causal], str(isa),
                                     values["threads"], values["seed"], bool(backward), values["repeat"],
                                     float(min_seconds), values["max_runs"]))
    except _ext.Error as e:
        raise _core.renamed(e, (("min_runs:", "repeat:"),)) from None  # the timer's field, here `repeat`


def buffer_pool_bytes() -> dict:
    """The buffers calls keep between calls (one process-wide pool: each call's scratch, strided
    copies and packed operands go back to it when the call returns, so the next call of that shape
    reuses them): 'held', the bytes of all its blocks, and 'busy', those running calls hold now."""
    return _ext.buffer_pool_bytes()


def release_buffers() -> int:
    """Hands the kept buffers that no running call holds back to the system; returns their bytes.
    For a process that ran one large call and wants its memory back; safe while other threads run
    calls. The next call allocates afresh (and keeps its buffers again); no result changes."""
    return _ext.release_buffers()


def dispatch() -> dict:
    """The one selection rule's outcome in this process (sdpa::active_dispatch): 'isa' (the path `auto`
    resolves to), 'engine' (what runs the avx512 path's 16-bit products: 'widened', 'amx' or 'dot'), and
    'isa_reason' and 'engine_reason' in words. SDPA_ISA, SDPA_AMX and SDPA_BF16_DOT steer it."""
    return _ext.dispatch()


def amx_bf16_active() -> bool:
    """Whether bf16 and fp16 calls (the tiled forward's two products, the backward's five) run on
    AMX-BF16 tiles in this process (fp16 split into bf16 hi + lo): the CPU has AMX-BF16, Linux granted the tile state, the kernel is the avx512 one, and the
    SDPA_AMX environment variable is not 0 (docs/contract.md); sdpa.dispatch() says why."""
    return _ext.amx_bf16_active()


def bf16_dot_active() -> bool:
    """Whether bf16 calls (the tiled forward's two products, the backward's five) run on AVX512_BF16
    dot products (vdpbf16ps) in this process: the CPU has AVX512_BF16, AMX is not active, the kernel
    is the avx512 one, and the CPU is AMD's (Zen 4 on) or SDPA_BF16_DOT is 1; SDPA_BF16_DOT=0 turns it
    off. On aarch64: BFDOT on the neon kernel where the CPU has BF16 and SDPA_BF16_DOT is 1. fp16 widens
    on that path (docs/contract.md)."""
    return _ext.bf16_dot_active()


def _index_array(name: str, x, kind: str, rank: int, batch: int):
    """cache_seqlens [B] or block_table [B, max_blocks] as the kernel takes it: int32 of q's kind, CPU. An int64
    one is narrowed (a copy of B or B * max_blocks ints; values past int32 are refused, not wrapped); cache_seqlens
    may be one int for every sequence."""
    if name == "cache_seqlens" and _is_int(x):
        x = _core._torch_module().full((batch,), x) if kind == "torch" else _core.np.full((batch,), x)
    if _kind(name, x) != kind:
        raise TypeError(f"{name}: not the same kind of array as q; pass a "
                        f"{'PyTorch tensor' if kind == 'torch' else 'NumPy array'}")
    _check_layout(name, x, kind)
    _check_rank(name, x, rank)
    if kind == "torch":
        t = _core._torch_module()
        ok = (t.int32, t.int64)
    else:
        ok = (_core.np.dtype(_core.np.int32), _core.np.dtype(_core.np.int64))
    if x.dtype not in ok:
        raise TypeError(f"{name}: dtype {x.dtype} is not supported; expected int32 (or int64, narrowed)")
    if x.dtype == ok[0]:
        return x
    if x.numel() if kind == "torch" else x.size:
        lo, hi = int(x.min()), int(x.max())
        if lo < -2 ** 31 or hi >= 2 ** 31:
            raise ValueError(f"{name}: entries must fit int32, got values in [{lo}, {hi}]")
    return x.to(t.int32) if kind == "torch" else x.astype(_core.np.int32)


_KV_FORMATS = ("int8", "fp8_e4m3")


class QuantizedKV:
    """An 8-bit K or V cache (or any [A, R, H, D] tensor): codes [A, R, H, D] uint8 and scales [A, H, R] float32,
    one per row of D, the value code x scale. format "int8" (symmetric, codes -127..127, scale = max|row| / 127)
    or "fp8_e4m3" (OCP e4m3fn bytes, up to 448, scale = max|row| / 448), rounded to nearest even. Made by
    sdpa.quantize_kv; attention_with_kvcache takes a pair of them as k_cache and v_cache, reads the codes where
    they lie and quantizes new tokens into them in place. NumPy arrays or PyTorch CPU tensors, as the input was.
    """

    __slots__ = ("codes", "scales", "format")

    def __init__(self, codes, scales, format):
        if format not in _KV_FORMATS:
            raise ValueError(f"format: expected 'int8' or 'fp8_e4m3', got {format!r}")
        if codes.ndim != 4 or scales.ndim != 3:
            raise ValueError(f"codes, scales: ranks {codes.ndim} and {scales.ndim} should be 4 ([A, R, H, D]) and 3 "
                             f"([A, H, R])")
        A, R, H, _ = codes.shape
        if tuple(scales.shape) != (A, H, R):
            raise ValueError(f"scales: shape {tuple(scales.shape)} should be {(A, H, R)} ([A, H, R] of codes' "
                             f"[A, R, H, D])")
        self.codes, self.scales, self.format = codes, scales, format

    @property
    def shape(self):
        return tuple(self.codes.shape)

    @property
    def nbytes(self) -> int:
        """Bytes held: the codes and the scales."""
        if _core._is_torch(self.codes):
            return int(self.codes.numel() + 4 * self.scales.numel())
        return int(self.codes.nbytes + self.scales.nbytes)

    def dequantize(self):
        """code x scale as float32, [A, R, H, D], of the codes' kind."""
        kind = "torch" if _core._is_torch(self.codes) else "numpy"
        out = _empty(kind, tuple(self.codes.shape))
        codes, scales, x = _fast_args(kind, self.codes, self.scales, out)
        _ext.dequantize_kv(codes, scales, self.format, x)
        return out

    def __repr__(self):
        return f"QuantizedKV(format={self.format!r}, shape={self.shape})"


def quantize_kv(x, format="int8"):
    """x [A, R, H, D] (a cache's [B, N, Hkv, D] or [blocks, block_size, Hkv, D]; any float dtype, NumPy or torch
    CPU) quantized row by row into a QuantizedKV: codes like x, one float32 scale per (a, r, h). A NaN or an
    infinity in x raises sdpa.Error (no code holds it). A cache to append into can start from zeros."""
    if format not in _KV_FORMATS:
        raise ValueError(f"format: expected 'int8' or 'fp8_e4m3', got {format!r}")
    kind = "torch" if _core._is_torch(x) else "numpy"
    if kind == "numpy" and not isinstance(x, _core.np.ndarray):
        raise TypeError(f"x: expected a NumPy array or a PyTorch CPU tensor, got {type(x).__name__}")
    _check_rank("x", x, 4)
    # float32, bfloat16 and float16 are read as they are, in any strides (the kernel widens a row at a time);
    # another float dtype (float64) through a float32 copy
    if kind == "torch":
        t = _core._torch_module()
        if not x.is_floating_point() or x.device.type != "cpu":
            raise TypeError(f"x: expected a floating-point CPU tensor, got {x.dtype} on {x.device}")
        xf = x.detach()
        if xf.dtype not in (t.float32, t.bfloat16, t.float16):
            xf = xf.to(t.float32)
        codes = t.empty(tuple(x.shape), dtype=t.uint8)
    else:
        if x.dtype.kind != "f":
            raise TypeError(f"x: expected a floating-point array, got dtype {x.dtype}")
        xf = x if x.dtype in (_core.np.float32, _core.np.float16) else x.astype(_core.np.float32)
        codes = _core.np.empty(x.shape, dtype=_core.np.uint8)
    A, R, H, _ = x.shape
    scales = _empty(kind, (A, H, R))
    xa, ca, sa = _fast_args(kind, xf, codes, scales)
    _ext.quantize_kv(xa, ca, sa, format)
    return QuantizedKV(codes, scales, format)


# The options the extension's forward_kvcache calls take (the rest of _options' arguments are passed apart)
_KVCACHE_ARGS = ("scale", "softcap", "causal", "window_left", "window_right", "threads", "kernel")


@functools.lru_cache(maxsize=1024)
def _kvcache_options(scale, causal: bool, window, softcap) -> dict:
    """The forward_kvcache calls' options for a model layer's call (no sinks, no threads), checked once per distinct
    set as _core._scalar_options checks the forward's: a decoding step's calls then parse nothing. Shared: copy
    before changing it. window must be hashable (a tuple), else TypeError: the caller's full path checks it."""
    opts = _core._scalar_options(scale, "bottom-right" if causal else None, window, softcap)
    return {name: opts[name] for name in _KVCACHE_ARGS}


def attention_with_kvcache(q, k_cache, v_cache, k=None, v=None, *, cache_seqlens, block_table=None, causal=False,
                           window=None, softcap=None, sinks=None, scale=None, threads=None, return_lse=False):
    """Attention over a KV cache (FlashAttention's flash_attn_with_kvcache): decoding and chunked prefill.

    q: [B, Nq, Hq, Dk], the new queries of each sequence (one or a few tokens). The cache, written in place:
      contiguous  k_cache [B, Nmax, Hkv, Dk], v_cache [B, Nmax, Hkv, Dv]; or
      paged       k_cache [blocks, block_size, Hkv, Dk], v_cache likewise, with block_table [B, max_blocks]
                  (int32): position p of sequence b is row p % block_size of block block_table[b, p // block_size].
      Any strided view of these shapes is read and written in place, with the same bits: a buffer that keeps
      each head's rows together ([B, Hkv, Nmax, D] seen through .transpose(1, 2), or blocks [blocks, Hkv,
      block_size, D] likewise) decodes faster than FlashAttention's order (docs/performance.md, "the cache's
      layout").
    cache_seqlens: [B] int32 (or int64, or one int for all): the tokens each sequence holds before the call.
    k, v: [B, Nnew, Hkv, Dk|Dv] or None: new tokens, written into the cache at positions cache_seqlens[b] ..
      cache_seqlens[b] + Nnew - 1, then attended to with the rest; without them, cache_seqlens counts the keys
      each sequence's queries read.
    causal: True: the queries are each sequence's last Nq positions (query i sees keys j <= i + L - Nq for a
      sequence of L keys, bottom-right); False: every query sees all L keys. window, softcap, sinks, scale,
      threads: as in sdpa.attention (the window around the same bottom-right diagonal).
    NumPy arrays or PyTorch CPU tensors, one kind; q, the caches, k and v one dtype of float32, float16 or
    (torch) bfloat16. Returns out [B, Nq, Hq, Dv] in q's dtype (and lse [B, Hq, Nq] float32 with return_lse).
    A sequence with no keys gets out 0 and lse -inf (its sink's logit with sinks). Inference only: no
    gradient flows (a tensor that requires grad with autograd on is refused). Every argument is checked
    before the cache is written (a block outside the cache, a sequence that would outgrow it, two sequences
    appending into one block: sdpa.Error naming it). Per sequence the result is sdpa.attention's on its
    keys, to the bit, for any thread count.

    Quantized caches: k_cache and v_cache may be a pair of sdpa.QuantizedKV (sdpa.quantize_kv; codes laid out as
    the float caches above, scales [B, Hkv, Nmax] or [blocks, Hkv, block_size]). New tokens are quantized into
    them in place (a NaN or infinity among them is refused); the result is the attention of the dequantized
    cache to fp32 accuracy (bf16 queries: to the bf16 rule), and the codes are read where they lie: by the
    decoding loop (up to 8 query lanes, Hq/Hkv x Nq, per kv head), and for longer chunks a key tile at a time
    by the tiled loop, or with bf16 queries by the 16-bit engine's where the CPU has one (AMX, AVX512-BF16).
    """
    quantized = isinstance(k_cache, QuantizedKV) or isinstance(v_cache, QuantizedKV)
    if quantized:
        if not (isinstance(k_cache, QuantizedKV) and isinstance(v_cache, QuantizedKV)):
            raise TypeError("k_cache, v_cache: both QuantizedKV (sdpa.quantize_kv) or both float; got one of each")
        if k_cache.format != v_cache.format:
            raise ValueError(f"v_cache: format {v_cache.format!r} differs from k_cache's {k_cache.format!r}")
    named = {"q": q} if quantized else {"q": q, "k_cache": k_cache, "v_cache": v_cache}
    if (k is None) != (v is None):
        raise ValueError(f"{'v' if v is None else 'k'}: missing; new keys and values come together (or neither)")
    if k is not None:
        named.update(k=k, v=v)
    kind = _check_tensors(named, "q", half_ok=True)
    for name, x in named.items():
        _check_rank(name, x, 4)
    # what the call writes in place: the float caches, or the codes and scales of the quantized ones
    written = {"k_cache": (k_cache.codes, k_cache.scales) if quantized else (k_cache,),
               "v_cache": (v_cache.codes, v_cache.scales) if quantized else (v_cache,)}
    for name, parts in written.items():
        for part in parts:
            if quantized and ("torch" if _core._is_torch(part) else "numpy") != kind:
                raise TypeError(f"{name}: its codes and scales must be the same kind as q (NumPy or torch)")
            if kind == "numpy" and not part.flags.writeable:
                raise ValueError(f"{name}: read-only; the cache is written in place (new tokens appended), so it "
                                 f"must be a writable array")
    if kind == "torch" and _core._torch_module().is_grad_enabled() and any(x.requires_grad for x in named.values()):
        raise ValueError("attention_with_kvcache: has no backward (inference over a cache); call it under "
                         "torch.no_grad() or with tensors that do not require grad")
    if not isinstance(causal, bool):
        raise TypeError(f"causal: expected a bool (True: bottom-right over each sequence's keys), got {causal!r}")
    B, Nq, Hq, _ = q.shape
    seqlens = _index_array("cache_seqlens", cache_seqlens, kind, 1, B)
    table = None if block_table is None else _index_array("block_table", block_table, kind, 2, B)
    opts = _options({"scale": scale, "causal": "bottom-right" if causal else None, "window": window,
                     "softcap": softcap, "sinks": sinks, "threads": threads}, kind=kind,
                    caller="attention_with_kvcache")
    out = _empty(kind, (B, Nq, Hq, written["v_cache"][0].shape[3]), q.dtype)
    lse = _empty(kind, (B, Hq, Nq)) if return_lse else None
    args = {name: opts[name] for name in _KVCACHE_ARGS}
    qx, kc, vc, sl, bt, kx, vx, ox, lx, sx = _fast_args(kind, q, written["k_cache"][0], written["v_cache"][0], seqlens,
                                                        table, k, v, out, lse, opts["sinks"])
    try:
        if quantized:
            ks, vs = _fast_args(kind, k_cache.scales, v_cache.scales)
            _ext.forward_kvcache_quantized(qx, kc, vc, ks, vs, k_cache.format, sl, bt, kx, vx, ox, lx, sinks=sx,
                                           **args)
        else:
            _ext.forward_kvcache(qx, kc, vc, sl, bt, kx, vx, ox, lx, sinks=sx, **args)
    except (TypeError, ValueError) as e:
        raise _core.renamed(e, _KVCACHE_NAMES) from None
    return (out, lse) if return_lse else out


_KVCACHE_NAMES = (("k_new:", "k:"), ("v_new:", "v:"))  # the library's names of the new tokens, and ours

"""The torch-free core: argument checks, the options table, result allocation and the calls into the C++
module sdpa._ext.

Everything that can be said about an argument in Python is checked here, so that the error names the
argument and says what to do; the extension module itself only takes arrays that already fit (float32, or
float16/bfloat16 for attention; CPU, fixed rank) and never copies one. Nothing here imports torch: a
tensor argument means the caller has, and torch is then found in sys.modules. The public functions
(sdpa._api) call this module; the custom ops (sdpa._ops) wrap its kernel calls.
"""

from __future__ import annotations

import functools
import inspect
import numbers
import sys

import numpy as np

from . import _ext

# The attention options, said once. Adding one touches the C++ Options, the binding's keyword arguments
# (python/src/sdpa_ext.cpp), these two tables and its conversion in _options.
#
# OPTIONS: what a caller passes by keyword to sdpa.attention, reference_attention, attention_backward,
# attention_varlen, explain and sdpa.distributed.ring_attention, with its default. Those functions take
# **options, and with_options writes the table into their signatures (help(), inspect).
OPTIONS = (("scale", None), ("causal", None), ("window", None), ("softcap", None), ("mask", None), ("sinks", None),
           ("threads", None), ("dropout_p", 0.0), ("dropout_seed", None), ("dropout_offset", 0))
_OPTION_DEFAULTS = dict(OPTIONS)

# KERNEL_ARGS: what _options turns them into, with their TorchScript schema types: the keyword arguments of
# _ext.forward, backward, forward_varlen and backward_varlen, and in this order the trailing arguments of
# the custom ops sdpa::forward, backward, forward_varlen and backward_varlen (sdpa._ops writes their
# schemas from it).
KERNEL_ARGS = (("mask", "Tensor?"), ("keep", "Tensor?"), ("sinks", "Tensor?"), ("scale", "float?"), ("softcap", "float?"),
               ("causal", "str"), ("window_left", "int"), ("window_right", "int"), ("threads", "int"),
               ("kernel", "str"), ("dropout_p", "float"), ("dropout_seed", "int"), ("dropout_offset", "int"))
KERNEL_ARG_NAMES = tuple(name for name, _ in KERNEL_ARGS)


def renamed(error: Exception, names) -> Exception:
    """The same exception with the library's argument name (the message's first word) in the caller's terms:
    names holds (ours, theirs) pairs such as ("q:", "query:")."""
    msg = str(error)
    for ours, theirs in names:
        if msg.startswith(ours):
            msg = theirs + msg[len(ours):]
            break
    return type(error)(msg)


def with_options(*, exclude=()):
    """A public function taking **options gets OPTIONS (less exclude) as keyword-only parameters in its
    signature, after its own."""
    def decorate(fn):
        sig = inspect.signature(fn)
        own = [p for p in sig.parameters.values() if p.kind is not inspect.Parameter.VAR_KEYWORD]
        extra = [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default)
                 for name, default in OPTIONS if name not in exclude]
        fn.__signature__ = sig.replace(parameters=own + extra)
        return fn
    return decorate


_CAUSAL = {None: "none", "top-left": "top-left", "bottom-right": "bottom-right"}


_torch = None


def _torch_module():
    """torch if the caller has imported it (a torch tensor cannot exist otherwise); looked up until found, then
    kept (called several times per call, which matters for small calls)."""
    global _torch
    if _torch is None:
        _torch = sys.modules.get("torch")
    return _torch


def _is_torch(x) -> bool:
    t = _torch_module()
    return t is not None and isinstance(x, t.Tensor)


def _kind(name: str, x) -> str:
    if isinstance(x, np.ndarray):
        return "numpy"
    if _is_torch(x):
        return "torch"
    raise TypeError(f"{name}: expected a NumPy array or a PyTorch tensor, got {type(x).__module__}.{type(x).__name__}")


def _check_layout(name: str, x, kind: str) -> None:
    """Device and memory layout: what the kernel can read in place."""
    if kind == "torch":
        t = _torch_module()
        if x.device.type != "cpu":
            raise ValueError(f"{name}: tensor is on device '{x.device}'; sdpa runs on the CPU "
                             f"(move it with {name}.cpu())")
        if x.layout != t.strided:
            raise TypeError(f"{name}: layout {x.layout} is not supported; sdpa needs a strided (dense) tensor "
                            f"(convert with {name}.to_dense())")
        return
    item = x.itemsize
    if any(s % item for s in x.strides):
        raise ValueError(f"{name}: strides {x.strides} (bytes) are not a multiple of the element size "
                         f"{item}; sdpa reads arrays in place and needs whole-element strides "
                         f"(make a copy with numpy.ascontiguousarray({name}))")
    if not x.flags.aligned:
        raise ValueError(f"{name}: data is not aligned to its {item}-byte elements "
                         f"(make a copy with numpy.ascontiguousarray({name}))")


def _half_dtypes(kind: str) -> tuple:
    """The 16-bit dtypes the kernel takes (one dtype per call): NumPy has float16 only."""
    if kind == "torch":
        t = _torch_module()
        return (t.float16, t.bfloat16)
    return (np.dtype(np.float16),)


def _check_float32(name: str, x, kind: str, half_ok: bool = False) -> None:
    is_f32 = x.dtype == (_torch_module().float32 if kind == "torch" else np.float32)
    if is_f32 or (half_ok and x.dtype in _half_dtypes(kind)):
        return
    if half_ok:
        if kind == "torch":
            raise TypeError(f"{name}: dtype {x.dtype} is not supported; sdpa takes float32, float16 or bfloat16 "
                            f"(convert with {name}.float(); a float64 tensor is not downcast silently)")
        raise TypeError(f"{name}: dtype {x.dtype} is not supported; sdpa takes float32 or float16 (convert with "
                        f"{name}.astype(numpy.float32); a float64 array is not downcast silently)")
    if kind == "torch":
        t = _torch_module()
        if x.dtype != t.float32:
            raise TypeError(f"{name}: dtype {x.dtype} is not supported; sdpa computes in float32 "
                            f"(convert with {name}.float(); a float64 tensor is not downcast silently)")
    elif x.dtype != np.float32:
        raise TypeError(f"{name}: dtype {x.dtype} is not supported; sdpa computes in float32 "
                        f"(convert with {name}.astype(numpy.float32); a float64 array is not downcast silently)")


def _plain_tensors(named: dict, first: str, half_ok: bool) -> bool:
    """Whether every array is a plain torch CPU tensor, strided, of one supported dtype and one rank in 2..4:
    what _check_tensors accepts in a model, tested at once (its general checks cost ~5 us a call, a tenth of
    a small call: docs/python.md, "Small calls: where the time goes"). False sends the call through those
    checks, which then name the argument at fault."""
    t = _torch_module()
    x0 = named[first]
    if t is None or type(x0) is not t.Tensor:
        return False
    dtype, rank = x0.dtype, x0.ndim
    if not (dtype is t.float32 or (half_ok and (dtype is t.float16 or dtype is t.bfloat16))) or not 2 <= rank <= 4:
        return False
    tensor, strided = t.Tensor, t.strided
    for x in named.values():
        if type(x) is not tensor or not x.is_cpu or x.layout is not strided or x.dtype is not dtype or x.ndim != rank:
            return False
    return True


def _check_tensors(named: dict, first: str, half_ok: bool = False) -> str:
    """q, k, v (or more) under their argument names: one kind, float32 (or with half_ok one dtype of
    float32, float16, bfloat16 for all), CPU, one rank in 2..4."""
    if _plain_tensors(named, first, half_ok):
        return "torch"
    kind = _kind(first, named[first])
    rank = named[first].ndim
    for name, x in named.items():
        kx = _kind(name, x)
        if kx != kind:
            raise TypeError(f"{name}: a {'PyTorch tensor' if kx == 'torch' else 'NumPy array'} while {first} is a "
                            f"{'PyTorch tensor' if kind == 'torch' else 'NumPy array'}; pass the same kind for all")
        _check_layout(name, x, kind)
        _check_float32(name, x, kind, half_ok)
        if x.dtype != named[first].dtype:
            raise TypeError(f"{name}: dtype {x.dtype} differs from {first}'s {named[first].dtype}; one dtype per call "
                            f"(convert with .astype() or .to())")
        if x.ndim != rank:
            raise ValueError(f"{name}: rank {x.ndim} (shape {tuple(x.shape)}) differs from {first}'s rank {rank} "
                             f"(shape {tuple(named[first].shape)})")
    if not 2 <= rank <= 4:
        raise ValueError(f"{first}: shape {tuple(named[first].shape)} has rank {rank}; expected [B, H, N, D], "
                         f"[H, N, D] or [N, D]")
    return kind


def _check_rank(name: str, x, rank: int) -> None:
    if x.ndim != rank:
        raise ValueError(f"{name}: rank {x.ndim} (shape {tuple(x.shape)}) should be {rank}")


def _raw(x):
    """What the extension receives: the same memory, never a copy (torch: without autograd)."""
    return x.detach() if _is_torch(x) else x


def _fast_args(kind: str, *xs) -> list:
    """[_raw(x) for x in xs], faster for small calls: torch tensors go as DLPack capsules of themselves without
    autograd (torch.utils.dlpack.to_dlpack), which nanobind takes as it takes the tensors. Tensor.__dlpack__,
    which nanobind calls otherwise, spends ~3 us a tensor in Python checks (measured, docs/python.md): as much
    as a decoding step's kernel. Only for the extension's functions with one signature (forward, backward):
    nanobind consumes a capsule in the first overload that tries it, so an overloaded one (forward_varlen:
    int32 or int64 offsets) could not retry. A capsule holds a reference to its tensor until the call ends."""
    if kind != "torch":
        return list(xs)
    to_dlpack = _torch_module().utils.dlpack.to_dlpack
    # None: no mask or no lse (_options checked the mask's kind); detach() only where needed (it makes a tensor)
    return [None if x is None else to_dlpack(x.detach() if x.requires_grad else x) for x in xs]


def _to4(x, rank: int = 4):
    """A view with size-1 dimensions prepended up to `rank` (indexing with None never copies)."""
    return x[(None,) * (rank - x.ndim)] if x.ndim < rank else x


def _from4(x, ndim: int, rank: int = 4):
    return x[(0,) * (rank - ndim)] if ndim < rank else x


def _empty(kind: str, shape, dtype=None):
    """A fresh C-contiguous buffer, float32 unless dtype (of the caller's kind) is given."""
    if kind == "torch":
        t = _torch_module()
        return t.empty(shape, dtype=t.float32 if dtype is None else dtype)
    return np.empty(shape, dtype=np.float32 if dtype is None else dtype)


def _empty_like(kind: str, x):
    """A fresh buffer of x's dtype shaped like x, in x's memory order where x is dense (so a gradient has its
    input's layout: a [B, N, H, D] buffer's view gets a [B, N, H, D] gradient)."""
    if kind == "torch":
        return _torch_module().empty_like(x)
    return np.empty_like(x, order="K")


def _mask_arrays(mask, packed: bool = False):
    """(additive float32 view, keep-mask uint8 view), at rank 4, one of them None or both. packed: the mask of a
    packed batch (attention_varlen), rank 3 [Hq|1, Tq|1, Tk|1], seen as (1, Hq|1, Tq|1, Tk|1)."""
    if mask is None:
        return None, None
    kind = _kind("mask", mask)
    _check_layout("mask", mask, kind)
    if packed and mask.ndim != 3:
        raise ValueError(f"mask: shape {tuple(mask.shape)} has rank {mask.ndim}; packed sequences take a rank-3 "
                         f"[Hq, Tq, Tk] mask (size-1 dimensions broadcast; sequence s reads rows "
                         f"cu_seqlens_q[s]:cu_seqlens_q[s+1] and columns cu_seqlens_k[s]:cu_seqlens_k[s+1])")
    if mask.ndim > 4:
        raise ValueError(f"mask: shape {tuple(mask.shape)} has rank {mask.ndim}; it must broadcast to "
                         f"[B, Hq, Nq, Nk] (rank 4 at most)")
    if mask.ndim < 2:
        raise ValueError(f"mask: shape {tuple(mask.shape)} has rank {mask.ndim}; give at least [Nq, Nk] "
                         f"(size-1 dimensions broadcast)")
    m = _to4(mask)
    if kind == "torch":
        t = _torch_module()
        if mask.requires_grad and t.is_grad_enabled():
            raise ValueError("mask: requires grad, but sdpa does not compute gradients with respect to the mask "
                             "(pass mask.detach())")
        m = m.detach()
        if mask.dtype == t.bool:
            return None, m.view(t.uint8)
        if mask.dtype == t.float32:
            return m, None
        if mask.dtype in (t.float16, t.bfloat16):  # a 16-bit model's mask: widened (exactly), a copy of the mask only
            return m.float(), None
    else:
        if mask.dtype == np.bool_:
            return None, m.view(np.uint8)
        if mask.dtype == np.float32:
            return m, None
        if mask.dtype == np.float16:
            return m.astype(np.float32), None
    raise TypeError(f"mask: dtype {mask.dtype} is not supported; give bool (True keeps a key, as in PyTorch) "
                    f"or float32 / float16 / bfloat16 (added to the scores; -inf masks)")


_SEED_LIMIT = 2 ** 64  # Philox's key: seeds and offsets are unsigned 64-bit


# isinstance against the numbers ABCs costs ~0.4 us a test, and _options makes a dozen a call: the exact
# built-in types are tested first (bool is neither: type(True) is bool).
def _is_real(x) -> bool:
    return type(x) is float or type(x) is int or (not isinstance(x, bool) and isinstance(x, numbers.Real))


def _is_int(x) -> bool:
    return type(x) is int or (not isinstance(x, bool) and isinstance(x, numbers.Integral))


def _options(options: dict, *, kernel: str = "fast", kind=None, seed: str = "draw", packed_mask: bool = False,
             caller: str = "attention", exclude=()) -> dict:
    """The kernel's arguments (KERNEL_ARGS, in order) from a caller's options (OPTIONS' names, any subset),
    each checked under its own name. kind: q's, which the mask's must be (a NumPy mask beside tensors would
    reach the custom op, which takes tensors only). seed: what dropout_seed=None means with dropout_p > 0:
    "draw" one (_dropout_seed), or "later", 0 here and the caller's to settle (the backward requires the
    forward's; ring attention draws one for all ranks)."""
    for name in options:
        if name not in _OPTION_DEFAULTS or name in exclude:
            raise TypeError(f"{caller}() got an unexpected keyword argument {name!r}")
    get = options.get
    scale, causal, window, softcap = get("scale"), get("causal"), get("window"), get("softcap")
    mask, sinks, threads, dropout_p = get("mask"), get("sinks"), get("threads"), get("dropout_p", 0.0)
    dropout_seed, dropout_offset = get("dropout_seed"), get("dropout_offset", 0)
    if mask is not None and kind is not None and _kind("mask", mask) != kind:
        raise TypeError(f"mask: not the same kind of array as q; pass a "
                        f"{'PyTorch tensor' if kind == 'torch' else 'NumPy array'}")
    if not _is_real(dropout_p):
        raise TypeError(f"dropout_p: expected a real number in [0, 1), got {type(dropout_p).__name__}")
    if not 0.0 <= dropout_p < 1.0:
        raise ValueError(f"dropout_p: must be in [0, 1), got {dropout_p}")
    if seed == "draw":
        dropout_seed = _dropout_seed(kind, dropout_p, dropout_seed)
    elif dropout_seed is None:
        dropout_seed = 0
    for name, val in (("dropout_seed", dropout_seed), ("dropout_offset", dropout_offset)):
        if not _is_int(val) or not 0 <= val < _SEED_LIMIT:
            raise TypeError(f"{name}: expected an int in [0, 2**64), got {val!r}")
    if scale is not None and not _is_real(scale):
        raise TypeError(f"scale: expected a real number or None (for 1/sqrt(Dk)), got {type(scale).__name__}")
    if softcap is not None and not _is_real(softcap):
        raise TypeError(f"softcap: expected a real number > 0 or None, got {type(softcap).__name__}")
    if not isinstance(causal, (str, type(None))) or causal not in _CAUSAL:
        raise ValueError(f"causal: expected None, 'top-left' (PyTorch's is_causal) or 'bottom-right' "
                         f"(a KV cache's alignment), got {causal!r}")
    left = right = -1
    if window is not None:
        try:
            left, right = window
        except (TypeError, ValueError):
            raise ValueError(f"window: expected (left, right), each an int >= 0 or -1/None for unbounded, "
                             f"got {window!r}") from None
        left = -1 if left is None else left
        right = -1 if right is None else right
        for side, val in (("left", left), ("right", right)):
            if not _is_int(val):
                raise TypeError(f"window: {side} must be an int (or -1/None for unbounded), got {val!r}")
    if threads is None:
        threads = 0
    if not _is_int(threads):
        raise TypeError(f"threads: expected an int >= 0 (0 or None: all available), got {threads!r}")
    additive, keep = _mask_arrays(mask, packed_mask)
    if sinks is not None:
        _check_sinks(sinks, kind)
    return {
        "mask": additive,
        "keep": keep,
        "sinks": sinks,
        "scale": None if scale is None else float(scale),
        "softcap": None if softcap is None else float(softcap),
        "causal": _CAUSAL[causal],
        "window_left": int(left),
        "window_right": int(right),
        "threads": int(threads),
        "kernel": kernel,
        "dropout_p": float(dropout_p),
        "dropout_seed": int(dropout_seed),
        "dropout_offset": int(dropout_offset),
    }


def _check_sinks(sinks, kind) -> None:
    """sinks: one float32 logit per query head, [Hq], the same kind as q (its length and values: the library).
    A tensor may require grad: the gradient reaches it (sdpa._ops)."""
    ks = _kind("sinks", sinks)
    if kind is not None and ks != kind:
        raise TypeError(f"sinks: not the same kind of array as q; pass a "
                        f"{'PyTorch tensor' if kind == 'torch' else 'NumPy array'}")
    _check_layout("sinks", sinks, ks)
    _check_float32("sinks", sinks, ks)
    _check_rank("sinks", sinks, 1)


def _dropout_seed(kind: str, dropout_p, dropout_seed):
    """The seed dropout uses: the caller's; else, for torch tensors, one drawn from torch's default CPU
    generator (so torch.manual_seed makes a run repeatable, and each call draws a fresh mask); 0 when
    there is no dropout. NumPy arrays with dropout_p > 0 need an explicit seed."""
    if dropout_seed is not None or not dropout_p:
        return 0 if dropout_seed is None else dropout_seed
    if kind != "torch":
        raise ValueError("dropout_seed: required with dropout_p > 0 for NumPy arrays (an int; with the same seed "
                         "and dropout_offset the backward regenerates the same mask)")
    t = _torch_module()
    return int(t.randint(0, 2 ** 63 - 1, (), dtype=t.int64))  # the custom ops' int is int64


def _forward4(kind: str, q, k, v, opts: dict, with_lse: bool = True):
    """out [B, Hq, Nq, Dv] in q's dtype and lse [B, Hq, Nq] in float32 (None unless with_lse: the kernel then
    writes none), freshly allocated, written by the kernel."""
    B, Hq, Nq, _ = q.shape
    out = _empty(kind, (B, Hq, Nq, v.shape[3]), q.dtype)
    lse = _empty(kind, (B, Hq, Nq)) if with_lse else None
    _ext.forward(*_fast_args(kind, q, k, v, out, lse), **_fast_masks(kind, opts))
    return out, lse


@functools.lru_cache(maxsize=1024)
def _scalar_options(scale, causal, window, softcap) -> dict:
    """The kernel's arguments (KERNEL_ARGS) for options without arrays or dropout, checked by _options once per
    distinct set: a model's layers repeat a handful, and an inference call inside a model then pays no option
    parsing (docs/python.md, "Inside a model"). The dict is shared: callers copy before changing it. window
    must be hashable (a tuple), else TypeError: the caller's full path then checks it."""
    return _options({"scale": scale, "causal": causal, "window": window, "softcap": softcap})


def _forward_bnhd(q, k, v, opts: dict, keep=None, sinks=None):
    """The inference call of a torch model: out [B, Nq, Hq, Dv], contiguous in the layout a model's output
    projection reads (the kernel writes it through its [B, Hq, Nq, Dv] view), for torch q, k, v [B, H, N, D]
    on the "direct" route (_torch_route), opts from _scalar_options, keep a bool mask's uint8 view, sinks
    float32 [Hq]. Nothing else is checked in Python: the library validates shapes, strides and dtypes
    (sdpa.Error) and nanobind the devices (TypeError), and a caller takes the full path on either to have
    the error named."""
    B, Hq, Nq, _ = q.shape
    out = _torch_module().empty((B, Nq, Hq, v.shape[3]), dtype=q.dtype)
    if keep is not None or sinks is not None:
        keep, sinks = _fast_args("torch", keep, sinks)
        opts = {**opts, "keep": keep, "sinks": sinks}
    _ext.forward(*_fast_args("torch", q, k, v, out.transpose(1, 2), None), **opts)
    return out


def _backward4(kind: str, q, k, v, out, lse, dout, opts: dict):
    """dq, dk, dv like q, k, v, and dsinks [Hq] float32 where opts has sinks (else None)."""
    dq, dk, dv = _empty_like(kind, q), _empty_like(kind, k), _empty_like(kind, v)
    dsinks = None if opts["sinks"] is None else _empty(kind, (q.shape[1],))
    _ext.backward(*_fast_args(kind, q, k, v, out, lse, dout, dq, dk, dv), **_fast_masks(kind, opts),
                  dsinks=_raw(dsinks))
    return dq, dk, dv, dsinks


def _fast_masks(kind: str, opts: dict) -> dict:
    """opts with its arrays (the masks, the sinks) passed as _fast_args passes tensors."""
    if opts["mask"] is None and opts["keep"] is None and opts["sinks"] is None:
        return opts
    mask, keep, sinks = _fast_args(kind, opts["mask"], opts["keep"], opts["sinks"])
    return {**opts, "mask": mask, "keep": keep, "sinks": sinks}


def _raw_arrays(opts: dict) -> dict:
    """opts with its arrays as _raw passes them (for the extension's overloaded functions: no capsules)."""
    return {**opts, "mask": _raw(opts["mask"]), "keep": _raw(opts["keep"]), "sinks": _raw(opts["sinks"])}


def _torch_route(*tensors) -> str:
    """How a torch call runs: "op" through the custom op sdpa::forward, for anything that traces or wraps it
    (torch.compile and export, a dispatch or function mode, a tensor subclass such as FakeTensor, functorch's
    wrappers), which can record the op; "autograd" through sdpa._ops.EagerAutograd, the op's autograd
    without its dispatch, for an eager call that needs gradients (grad mode on and an input that requires
    grad); else "direct" (inference: a model's eval forward, decoding), _forward4 itself. The op's dispatch is
    pure cost outside tracing — measured 30-50 us a call, as much as a decoding step's kernel, and ~200 us of a
    small training step (docs/python.md) — and all three routes run the same body on the same arguments, so
    the same bits."""
    t = _torch_module()
    if t.compiler.is_compiling() or t._C._len_torch_dispatch_stack() or t.overrides._get_current_function_mode_stack():
        return "op"
    tensor, wrapped, needs_grad = t.Tensor, t._C._functorch.is_functorch_wrapped_tensor, False
    for x in tensors:
        if x is None:
            continue
        if type(x) is not tensor or wrapped(x):
            return "op"
        needs_grad = needs_grad or x.requires_grad
    return "autograd" if needs_grad and t.is_grad_enabled() else "direct"


# ---- packed variable-length batches -------------------------------------------------------------

def _check_offsets(name: str, x, kind: str) -> None:
    """cu_seqlens_q / cu_seqlens_k: the same kind as q, int32 or int64, rank 1 (values: the library)."""
    kx = _kind(name, x)
    if kx != kind:
        raise TypeError(f"{name}: a {'PyTorch tensor' if kx == 'torch' else 'NumPy array'} while q is a "
                        f"{'PyTorch tensor' if kind == 'torch' else 'NumPy array'}; pass the same kind for all")
    _check_layout(name, x, kind)
    if kind == "torch":
        t = _torch_module()
        ok = x.dtype in (t.int32, t.int64)
    else:
        ok = x.dtype in (np.int32, np.int64)
    if not ok:
        raise TypeError(f"{name}: dtype {x.dtype} is not supported; give int32 or int64 offsets "
                        f"(batch + 1 of them, from 0 to the packed length)")
    _check_rank(name, x, 1)
    if kind == "torch" and x.requires_grad:
        raise TypeError(f"{name}: offsets cannot require grad")


def _forward_varlen(kind: str, q, k, v, cu_q, cu_k, opts: dict):
    """out [Tq, Hq, Dv] in q's dtype and lse [Hq, Tq] in float32, freshly allocated, written by the kernel."""
    Tq, Hq, _ = q.shape
    out = _empty(kind, (Tq, Hq, v.shape[2]), q.dtype)
    lse = _empty(kind, (Hq, Tq))
    _ext.forward_varlen(*(_raw(x) for x in (q, k, v, cu_q, cu_k, out, lse)), **_raw_arrays(opts))
    return out, lse


def _backward_varlen(kind: str, q, k, v, cu_q, cu_k, out, lse, dout, opts: dict):
    """dq, dk, dv like q, k, v, and dsinks [Hq] float32 where opts has sinks (else None)."""
    dq, dk, dv = (_empty(kind, tuple(x.shape), x.dtype) for x in (q, k, v))
    dsinks = None if opts["sinks"] is None else _empty(kind, (q.shape[1],))
    _ext.backward_varlen(*(_raw(x) for x in (q, k, v, cu_q, cu_k, out, lse, dout, dq, dk, dv)), **_raw_arrays(opts),
                         dsinks=dsinks)
    return dq, dk, dv, dsinks

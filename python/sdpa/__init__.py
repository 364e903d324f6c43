"""sdpa — exact scaled dot-product attention for NumPy arrays and PyTorch CPU tensors.

    import numpy as np, sdpa
    q = k = v = np.random.default_rng(0).standard_normal((1, 8, 128, 64), dtype=np.float32)
    out = sdpa.attention(q, k, v, causal="top-left")

sdpa.attention / sdpa.reference_attention / sdpa.attention_backward / sdpa.attention_varlen
(packed sequences of different lengths): the C++ library's kernels, reading float32 arrays
in place through their strides. sdpa.torch (imported on first use, needs PyTorch):
scaled_dot_product_attention with autograd, through the custom ops
torch.ops.sdpa.forward/backward (torch.compile, torch.export). sdpa.transformers (needs
transformers): the Hugging Face attention backend "exact_cpu". sdpa.distributed (needs
torch.distributed): ring attention over the ranks of a process group. sdpa.lab: the lab's
experiments as tables. sdpa.train: the training lab, one model per call. Bad arguments
raise TypeError, or ValueError (sdpa.Error for what the library itself refuses), naming
the argument. See docs/python.md.
"""

from ._api import QuantizedKV, active_isa, amx_bf16_active, attention, attention_with_kvcache, bf16_dot_active, buffer_pool_bytes, check, dispatch, explain, attention_backward, attention_varlen, quantize_kv, reference_attention, release_buffers
from ._ext import Error, __version__
from . import lab, train

__all__ = ["attention", "attention_varlen", "attention_with_kvcache", "quantize_kv", "QuantizedKV", "reference_attention", "attention_backward", "active_isa", "amx_bf16_active", "bf16_dot_active", "buffer_pool_bytes", "release_buffers", "check", "dispatch", "explain", "Error",
           "__version__", "lab", "train", "torch", "transformers", "distributed"]


def __getattr__(name):
    # sdpa.torch and sdpa.distributed import PyTorch (sdpa.transformers: transformers too), so they
    # load only when asked for.
    if name in ("torch", "transformers", "distributed"):
        import importlib

        return importlib.import_module("." + name, __name__)
    raise AttributeError(f"module 'sdpa' has no attribute {name!r}")

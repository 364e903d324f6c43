"""One rank of test_distributed.py, started by torchrun: sdpa.distributed.ring_attention's output
and gradients, shard by shard, against single-process attention in float64 (npref), within the
single-call rule (2 x naive fp32 error + floor) plus the merge's bound; and bit-identical on a
second run. Exits non-zero (an AssertionError) on any failure."""

import os
import sys

import numpy as np
import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(__file__))
import sdpa.distributed as sd  # noqa: E402
from npref import (assert_within, attention_ref, backward_ref, backward_floors, forward_floors,  # noqa: E402
                   merge_extra)

CASES = [  # (name, Nq, Nk, Hkv, options)
    ("full", 29, 29, 2, {}),
    ("top_left", 31, 31, 2, {"causal": "top-left"}),
    ("bottom_right_more_keys", 23, 37, 1, {"causal": "bottom-right"}),
    ("top_left_softcap", 30, 30, 4, {"causal": "top-left", "softcap": 4.0, "scale": 0.5}),
    ("window", 33, 33, 2, {"window": (5, 2)}),
]


def main():
    dist.init_process_group("gloo")
    size, rank = dist.get_world_size(), dist.get_rank()
    for layout in ("contiguous", "zigzag"):
        for seed, (name, Nq, Nk, Hkv, opts) in enumerate(CASES):
            g = torch.Generator().manual_seed(seed)  # the same on every rank
            B, Hq, D = 2, 4, 8
            q, k, v, dout = (torch.randn(*s, generator=g) for s in
                             ((B, Hq, Nq, D), (B, Hkv, Nk, D), (B, Hkv, Nk, D), (B, Hq, Nq, D)))
            out64, lse64, cache64 = attention_ref(q, k, v, **opts)
            outn, lsen, cachen = attention_ref(q, k, v, dtype=np.float32, **opts)
            gold = dict(zip(("dq", "dk", "dv"), backward_ref(cache64, dout)))
            naive = dict(zip(("dq", "dk", "dv"), backward_ref(cachen, dout)))
            f_out, f_lse = forward_floors(q, k, v, lse64, **opts)
            floors = dict(zip(("dq", "dk", "dv"), backward_floors(q, k, v, dout, gold["dv"], **opts)))
            parts = size * (2 if layout == "zigzag" else 1)
            e_out, _, *e_grad = merge_extra(q, k, v, dout, cache64["p"], parts, f_lse, **opts)
            extra = dict(zip(("dq", "dk", "dv"), e_grad))

            def local(x):
                return sd.shard(torch.as_tensor(np.asarray(x)), None, layout).numpy()

            def run():
                ql, kl, vl = (sd.shard(x, None, layout).requires_grad_() for x in (q, k, v))
                o = sd.ring_attention(ql, kl, vl, layout=layout, **opts)
                (o * sd.shard(dout, None, layout)).sum().backward()
                return o.detach(), ql.grad, kl.grad, vl.grad

            o, dq, dk, dv = run()
            tag = f"rank {rank}/{size} {layout} {name}"
            assert_within(f"{tag} out", o.numpy(), local(outn), local(out64), f_out + e_out)
            for key, got in (("dq", dq), ("dk", dk), ("dv", dv)):
                assert_within(f"{tag} {key}", got.numpy(), local(naive[key]), local(gold[key]),
                              floors[key] + extra[key])
            again = run()  # deterministic for a given number of ranks
            for a, b in zip((o, dq, dk, dv), again):
                assert torch.equal(a, b), f"{tag}: a second run differs"
            whole = sd.unshard(o, Nq, None, layout)
            assert torch.equal(sd.shard(whole, None, layout), o), f"{tag}: unshard(shard(x)) != x"
    # Options that differ between ranks: every rank raises.
    try:
        x = sd.shard(torch.randn(1, 2, 20, 8), None, "zigzag")
        sd.ring_attention(x, x, x, causal="top-left" if rank == size - 1 else None)
        raise AssertionError("mismatched options were accepted")
    except ValueError as e:
        assert "other options" in str(e), e
    dist.destroy_process_group()
    if rank == 0:
        print(f"dist_worker: {size} ranks, {len(CASES)} cases x 2 layouts: out and gradients within the bound")


if __name__ == "__main__":
    main()

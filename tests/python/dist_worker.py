"""One rank of test_distributed.py, started by torchrun: sdpa.distributed.ring_attention's output
and gradients, shard by shard, against single-process attention in float64 (npref), within the
single-call rule (2 x naive fp32 error + floor) plus the merge's bound; and bit-identical on a
second run. With dropout the reference applies the whole sequence's mask, read back from sdpa's
reference kernel (dropout_multipliers). Exits non-zero (an AssertionError) on any failure."""

import math
import os
import sys

import numpy as np
import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(__file__))
import sdpa  # noqa: E402
import sdpa.distributed as sd  # noqa: E402
from npref import (assert_within, attention_ref, backward_ref, backward_floors, forward_floors,  # noqa: E402
                   merge_extra, sink_grad_floor, sink_grad_ref)

CASES = [  # (name, Nq, Nk, Hkv, options)
    ("full", 29, 29, 2, {}),
    ("top_left", 31, 31, 2, {"causal": "top-left"}),
    ("bottom_right_more_keys", 23, 37, 1, {"causal": "bottom-right"}),
    ("top_left_softcap", 30, 30, 4, {"causal": "top-left", "softcap": 4.0, "scale": 0.5}),
    ("window", 33, 33, 2, {"window": (5, 2)}),
    # Dropout of the whole sequence: shard boundaries (29/4, 37/6, ...) split key quads.
    ("dropout_gqa", 29, 29, 2, {"dropout_p": 0.2, "dropout_seed": 5, "dropout_offset": 3}),
    ("dropout_bottom_right_mqa", 23, 37, 1, {"causal": "bottom-right", "dropout_p": 0.5, "dropout_seed": 2 ** 63 + 11}),
    # Attention sinks (one head without: -inf), merged once per row after every block; their
    # gradient summed over the ranks.
    ("sinks_bottom_right", 23, 37, 2, {"causal": "bottom-right", "sinks": [0.75, -1.5, 2.5, -math.inf]}),
    ("sinks_window_dropout", 29, 29, 1, {"window": (6, 2), "sinks": [1.0, 0.0, -0.5, 3.0], "dropout_p": 0.25,
                                         "dropout_seed": 12}),
]
_DROPOUT = ("dropout_p", "dropout_seed", "dropout_offset")


def dropout_multipliers(B, Hq, Nq, Nk, dropout_p, dropout_seed, dropout_offset=0):
    """M [B, Hq, Nq, Nk] = keep / (1 - p) of single-process sdpa attention with this seed, read back
    from the reference kernel (Dropout::keep): with q = 0 every p_ij is 1/Nk, and with v = the
    identity out_ij = keep_ij / (1 - p) / Nk."""
    q = np.zeros((B, Hq, Nq, 1), np.float32)
    k = np.zeros((B, Hq, Nk, 1), np.float32)
    v = np.ascontiguousarray(np.broadcast_to(np.eye(Nk, dtype=np.float32), (B, Hq, Nk, Nk)))
    out = sdpa.reference_attention(q, k, v, dropout_p=dropout_p, dropout_seed=dropout_seed,
                                   dropout_offset=dropout_offset)
    return np.where(np.asarray(out) * (1 - dropout_p) * Nk > 0.5, 1 / (1 - dropout_p), 0.0)


def main():
    dist.init_process_group("gloo")
    size, rank = dist.get_world_size(), dist.get_rank()
    for layout in ("contiguous", "zigzag"):
        for seed, (name, Nq, Nk, Hkv, opts) in enumerate(CASES):
            g = torch.Generator().manual_seed(seed)  # the same on every rank
            B, Hq, D = 2, 4, 8
            q, k, v, dout = (torch.randn(*s, generator=g) for s in
                             ((B, Hq, Nq, D), (B, Hkv, Nk, D), (B, Hkv, Nk, D), (B, Hq, Nq, D)))
            drop = {key: val for key, val in opts.items() if key in _DROPOUT}
            ref = {key: val for key, val in opts.items() if key not in _DROPOUT}
            m = dropout_multipliers(B, Hq, Nq, Nk, **drop) if drop else None
            out64, lse64, cache64 = attention_ref(q, k, v, dropout=m, **ref)
            outn, lsen, cachen = attention_ref(q, k, v, dtype=np.float32, dropout=m, **ref)
            gold = dict(zip(("dq", "dk", "dv"), backward_ref(cache64, dout)))
            naive = dict(zip(("dq", "dk", "dv"), backward_ref(cachen, dout)))
            f_out, f_lse = forward_floors(q, k, v, lse64, **ref)
            floors = dict(zip(("dq", "dk", "dv"), backward_floors(q, k, v, dout, gold["dv"], **ref)))
            parts = size * (2 if layout == "zigzag" else 1)
            e_out, e_lse, *e_grad = merge_extra(q, k, v, dout, cache64["p"], parts, f_lse, **ref)
            extra = dict(zip(("dq", "dk", "dv"), e_grad))
            # Dropout: the kept weights grow by 1/(1 - p), and with them the floors of out, dq, dk
            # (dv's is taken from max|dv|) and every merge term (tests/distributed/gold.hpp derives each).
            ks = 1 / (1 - drop.get("dropout_p", 0.0))
            f_out, e_out = f_out * ks, e_out * ks
            floors["dq"], floors["dk"] = floors["dq"] * ks, floors["dk"] * ks
            extra = {key: val * ks for key, val in extra.items()}

            def local(x):
                return sd.shard(torch.as_tensor(np.asarray(x)), None, layout).numpy()

            def run():
                ql, kl, vl = (sd.shard(x, None, layout).requires_grad_() for x in (q, k, v))
                sinks = None
                if "sinks" in opts:
                    sinks = torch.tensor(opts["sinks"], dtype=torch.float32, requires_grad=True)
                o = sd.ring_attention(ql, kl, vl, layout=layout, **{**opts, "sinks": sinks})
                (o * sd.shard(dout, None, layout)).sum().backward()
                return o.detach(), ql.grad, kl.grad, vl.grad, (None if sinks is None else sinks.grad)

            o, dq, dk, dv, dsinks = run()
            tag = f"rank {rank}/{size} {layout} {name}"
            assert_within(f"{tag} out", o.numpy(), local(outn), local(out64), f_out + e_out)
            for key, got in (("dq", dq), ("dk", dk), ("dv", dv)):
                assert_within(f"{tag} {key}", got.numpy(), local(naive[key]), local(gold[key]),
                              floors[key] + extra[key])
            if "sinks" in opts:  # every rank holds the whole sequence's gradient
                f_dsinks = sink_grad_floor(out64, lse64, dout, opts["sinks"], f_out + e_out, f_lse + e_lse)
                assert_within(f"{tag} dsinks", dsinks.numpy(), sink_grad_ref(cachen, dout), sink_grad_ref(cache64, dout),
                              f_dsinks)
            again = run()  # deterministic for a given number of ranks
            for a, b in zip((o, dq, dk, dv, dsinks), again):
                assert (a is None and b is None) or torch.equal(a, b), f"{tag}: a second run differs"
            whole = sd.unshard(o, Nq, None, layout)
            assert torch.equal(sd.shard(whole, None, layout), o), f"{tag}: unshard(shard(x)) != x"
    # Dropout without a seed: every rank draws from its own generator (here seeded differently)
    # and rank 0's draw is used, so the result is that of rank 0's seed given explicitly.
    x = sd.shard(torch.randn(1, 2, 21, 8, generator=torch.Generator().manual_seed(9)), None, "zigzag")
    torch.manual_seed(100 + rank)
    drawn = sd.ring_attention(x, x, x, dropout_p=0.3)
    rank0 = int(torch.randint(0, 2 ** 63 - 1, (), dtype=torch.int64, generator=torch.Generator().manual_seed(100)))
    assert torch.equal(drawn, sd.ring_attention(x, x, x, dropout_p=0.3, dropout_seed=rank0)), "not rank 0's seed"
    assert not torch.equal(drawn, sd.ring_attention(x, x, x)), "dropout_p had no effect"
    # Explicit seeds that differ between ranks: every rank raises.
    try:
        sd.ring_attention(x, x, x, dropout_p=0.3, dropout_seed=7 + (rank == size - 1))
        raise AssertionError("mismatched dropout seeds were accepted")
    except ValueError as e:
        assert "other options" in str(e), e
    # Options that differ between ranks: every rank raises.
    try:
        x = sd.shard(torch.randn(1, 2, 20, 8), None, "zigzag")
        sd.ring_attention(x, x, x, causal="top-left" if rank == size - 1 else None)
        raise AssertionError("mismatched options were accepted")
    except ValueError as e:
        assert "other options" in str(e), e
    # Sinks that differ between ranks (in the last bit): every rank raises.
    try:
        x = sd.shard(torch.randn(1, 2, 20, 8), None, "zigzag")
        sink = torch.tensor([0.5, 0.5], dtype=torch.float32)
        sd.ring_attention(x, x, x, sinks=sink if rank < size - 1 else torch.nextafter(sink, torch.ones(2)))
        raise AssertionError("mismatched sinks were accepted")
    except ValueError as e:
        assert "other options" in str(e), e
    dist.destroy_process_group()
    if rank == 0:
        print(f"dist_worker: {size} ranks, {len(CASES)} cases x 2 layouts: out and gradients within the bound")


if __name__ == "__main__":
    main()

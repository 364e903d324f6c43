"""Ring attention over torch.distributed: context parallelism for CPU tensors.

Each rank holds a shard of the sequence — its queries, keys and values, ``[B, H, N_local, D]``
(``shard`` cuts a whole tensor, ``unshard`` puts it back). ``ring_attention`` passes the K, V
shards round the ring of ranks with non-blocking sends and receives while each rank computes
its queries against the block it holds, merging the partial results by their log-sum-exp; the
backward sends dK, dV round after K, V so that each block comes home with every rank's share.
The arithmetic is the C++ library's building blocks (``sdpa/blocks.hpp``, through ``sdpa._ext``);
only the transport is torch.distributed's (gloo on CPU). The same algorithm over MPI is
``src/distributed/ring.cpp``; the layouts, the merge's error bound and the time model are in
docs/scaling.md.

The result equals single-process attention within the merge's bound, and is deterministic for
a given number of ranks (every merge and every gradient sum runs in a fixed order).
"""

from __future__ import annotations

import math

import torch
import torch.distributed as dist

from . import _core, _ext

__all__ = ["ring_attention", "shard", "unshard", "segments"]

_LAYOUTS = ("contiguous", "zigzag")


def _ranks(group):
    return dist.get_world_size(group), dist.get_rank(group)


def _global(group, r: int) -> int:
    return r if group is None else dist.get_global_rank(group, r)


def _check_layout(layout):
    if layout not in _LAYOUTS:
        raise ValueError(f"layout: expected 'contiguous' or 'zigzag', got {layout!r}")


def segments(n: int, group=None, layout: str = "zigzag", rank: int | None = None):
    """[(start, length)] of positions a rank (default: this one) holds of a length-n sequence."""
    _check_layout(layout)
    size, me = _ranks(group)
    return _ext.shard_segments(int(n), size, me if rank is None else rank, layout)


def shard(x: torch.Tensor, group=None, layout: str = "zigzag") -> torch.Tensor:
    """This rank's shard of a whole ``[B, H, N, D]`` tensor (a contiguous copy along dim 2)."""
    return torch.cat([x[:, :, s:s + n] for s, n in segments(x.shape[2], group, layout)], dim=2).contiguous()


def unshard(x: torch.Tensor, n: int, group=None, layout: str = "zigzag") -> torch.Tensor:
    """The whole ``[B, H, n, D]`` tensor from every rank's shard (an all-gather: every rank gets it)."""
    size, _ = _ranks(group)
    segs = [segments(n, group, layout, r) for r in range(size)]
    longest = max(sum(ln for _, ln in s) for s in segs)
    pad = torch.zeros(*x.shape[:2], longest, *x.shape[3:], dtype=x.dtype)
    pad[:, :, :x.shape[2]] = x
    parts = [torch.empty_like(pad) for _ in range(size)]
    dist.all_gather(parts, pad.contiguous(), group=group)
    out = torch.empty(*x.shape[:2], n, *x.shape[3:], dtype=x.dtype)
    for r in range(size):
        at = 0
        for s, ln in segs[r]:
            out[:, :, s:s + ln] = parts[r][:, :, at:at + ln]
            at += ln
    return out


class _Ring:
    """What both passes need: the ranks, the layouts' segments, the options."""

    def __init__(self, q, k, v, group, layout, options: dict):
        self.group, self.layout = group, layout
        # Checked as sdpa.attention checks them, before any collective; the block entry points
        # take the kernel's arguments less the masks and the kernel's name.
        checked = _core._options(options, kind="torch", seed="later", caller="ring_attention", exclude=("mask",))
        self.opts = {name: val for name, val in checked.items() if name not in ("mask", "keep", "sinks", "kernel")}
        # The sinks are no block's: each row's is merged once, after every block (sdpa/blocks.hpp).
        self.sinks = checked["sinks"]
        if self.sinks is not None and self.sinks.shape[0] != q.shape[1]:
            raise ValueError(f"sinks: shape [{self.sinks.shape[0]}] should be [Hq] = [{q.shape[1]}], "
                             "one logit per query head")
        dropout_p, dropout_seed = self.opts["dropout_p"], options.get("dropout_seed")
        self.size, self.rank = _ranks(group)
        self.next, self.prev = _global(group, (self.rank + 1) % self.size), _global(group, (self.rank - 1) % self.size)
        lengths = torch.tensor([q.shape[2], k.shape[2]], dtype=torch.int64)
        dist.all_reduce(lengths, group=group)  # the whole sequence's lengths
        self.nq, self.nk = (int(x) for x in lengths)
        if dropout_p and dropout_seed is None:
            # Every rank draws from its own torch generator (so generators seeded alike stay
            # alike) and all take rank 0's draw: one mask for the whole sequence.
            drawn = torch.tensor(_core._dropout_seed("torch", dropout_p, None), dtype=torch.int64)
            dist.broadcast(drawn, src=_global(group, 0), group=group)
            self.opts["dropout_seed"] = int(drawn)
        # Every rank must pass the same options and shapes; all raise together if one differs.
        sinks = None if self.sinks is None else [float(x).hex() for x in self.sinks.tolist()]  # every bit
        mine = repr((sorted(self.opts.items()), sinks, layout, q.shape[:2], q.shape[3], k.shape[:2], k.shape[3],
                     v.shape[3]))
        every = [None] * self.size
        dist.all_gather_object(every, mine, group=group)
        differ = [r for r in range(self.size) if every[r] != every[0]]
        if differ:
            raise ValueError(f"ring_attention: ranks {differ} pass other options or shapes than rank 0: {every[0]}")
        self.qsegs = _ext.shard_segments(self.nq, self.size, self.rank, layout)
        self.ksegs = [_ext.shard_segments(self.nk, self.size, r, layout) for r in range(self.size)]
        self.klen = [sum(n for _, n in s) for s in self.ksegs]
        bad = torch.tensor([int(q.shape[2] != sum(n for _, n in self.qsegs) or k.shape[2] != self.klen[self.rank])])
        dist.all_reduce(bad, group=group)
        if int(bad):
            raise ValueError(f"ring_attention: a rank's shard length is not its {layout} shard of the sequence "
                             f"(Nq = {self.nq}, Nk = {self.nk}); cut the tensors with sdpa.distributed.shard")
        B, Hkv, Dk, Dv = k.shape[0], k.shape[1], k.shape[3], v.shape[3]
        self.kv_shape = (B, Hkv, Dk, Dv)

    def floats(self, owner):
        B, Hkv, Dk, Dv = self.kv_shape
        return B * Hkv * self.klen[owner] * (Dk + Dv)

    def split(self, buf, owner):
        """K, V views of a packed [K | V] buffer of owner's shard."""
        B, Hkv, Dk, Dv = self.kv_shape
        n = self.klen[owner]
        return buf[:B * Hkv * n * Dk].view(B, Hkv, n, Dk), buf[B * Hkv * n * Dk:self.floats(owner)].view(B, Hkv, n, Dv)

    def blocks(self, owner):
        """(local query offset, query segment, local key offset, key segment) in the fixed order."""
        lq = 0
        for qs, qn in self.qsegs:
            lk = 0
            for ks, kn in self.ksegs[owner]:
                yield lq, qs, qn, lk, ks, kn
                lk += kn
            lq += qn

    def exchange(self, send, recv_owner, tag):
        """Starts sending `send` on and receiving the next owner's block; returns (buffer, requests)."""
        recv = torch.empty(self.floats(recv_owner), dtype=torch.float32)
        reqs = [dist.irecv(recv, src=self.prev, group=self.group, tag=tag),
                dist.isend(send, dst=self.next, group=self.group, tag=tag)]
        return recv, reqs


class _RingFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, sinks, ring: _Ring):
        q, k, v = (x.detach().contiguous() for x in (q, k, v))
        B, Hq, nq_local, _ = q.shape
        Dv = v.shape[3]
        out = torch.zeros(B, Hq, nq_local, Dv, dtype=torch.float32)
        lse = torch.full((B, Hq, nq_local), -math.inf, dtype=torch.float32)
        cur = torch.cat([k.reshape(-1), v.reshape(-1)])
        for step in range(ring.size):
            owner = (ring.rank - step) % ring.size
            reqs = []
            if step + 1 < ring.size:
                nxt, reqs = ring.exchange(cur, (owner - 1) % ring.size, step)
            kb, vb = ring.split(cur, owner)
            for lq, qs, qn, lk, ks, kn in ring.blocks(owner):
                po = torch.empty(B, Hq, qn, Dv, dtype=torch.float32)
                pl = torch.empty(B, Hq, qn, dtype=torch.float32)
                if _ext.forward_block(q[:, :, lq:lq + qn], kb[:, :, lk:lk + kn], vb[:, :, lk:lk + kn], po, pl, qs, ks,
                                      ring.nq, ring.nk, **ring.opts):
                    _ext.merge_partial(out[:, :, lq:lq + qn], lse[:, :, lq:lq + qn], po, pl,
                                       threads=ring.opts["threads"])
            for r in reqs:
                r.wait()
            if reqs:
                cur = nxt
        if sinks is not None:
            sinks = sinks.detach().contiguous()
            _ext.merge_sinks(out, lse, sinks, threads=ring.opts["threads"])
        ctx.ring = ring
        ctx.save_for_backward(q, k, v, out, lse, sinks)
        return out

    @staticmethod
    def backward(ctx, dout):
        ring = ctx.ring
        q, k, v, out, lse, sinks = ctx.saved_tensors
        dout = dout.contiguous()
        dq = torch.zeros_like(q)
        cur = torch.cat([k.reshape(-1), v.reshape(-1)])
        grad_tag = 1 << 14  # above every K, V step tag
        send_req = None
        for step in range(ring.size):
            owner = (ring.rank - step) % ring.size
            reqs = []
            if step + 1 < ring.size:
                nxt, reqs = ring.exchange(cur, (owner - 1) % ring.size, step)
            running, recv_req = None, None
            if step > 0:  # the ranks before this one's shares of owner's dK, dV
                running = torch.empty(ring.floats(owner), dtype=torch.float32)
                recv_req = dist.irecv(running, src=ring.prev, group=ring.group, tag=grad_tag + step)
            mine = torch.zeros(ring.floats(owner), dtype=torch.float32)
            kb, vb = ring.split(cur, owner)
            dkb, dvb = ring.split(mine, owner)
            for lq, qs, qn, lk, ks, kn in ring.blocks(owner):
                rows = slice(lq, lq + qn)
                _ext.backward_block(q[:, :, rows], kb[:, :, lk:lk + kn], vb[:, :, lk:lk + kn], out[:, :, rows],
                                    lse[:, :, rows], dout[:, :, rows], dq[:, :, rows], dkb[:, :, lk:lk + kn],
                                    dvb[:, :, lk:lk + kn], qs, ks, ring.nq, ring.nk, **ring.opts)
            if recv_req is not None:
                recv_req.wait()
                running += mine  # fixed order: the ranks before, then this one
            else:
                running = mine
            if send_req is not None:
                send_req.wait()
            if ring.size > 1:
                send_req = dist.isend(running, dst=ring.next, group=ring.group, tag=grad_tag + step + 1)
                sent = running  # kept alive until the send completes
            for r in reqs:
                r.wait()
            if reqs:
                cur = nxt
        home = running
        if ring.size > 1:  # this rank's own block, complete, from the previous rank
            home = torch.empty(ring.floats(ring.rank), dtype=torch.float32)
            dist.recv(home, src=ring.prev, group=ring.group, tag=grad_tag + ring.size)
            send_req.wait()
            del sent
        dk, dv = ring.split(home, ring.rank)
        return dq, dk.clone(), dv.clone(), _sink_grads(ring, out, lse, dout, sinks, ctx.needs_input_grad[3]), None


def _sink_grads(ring: _Ring, out, lse, dout, sinks, wanted: bool):
    """∂L/∂sinks of the whole sequence on every rank: the ranks' shares summed in rank order."""
    if sinks is None or not wanted:
        return None
    mine = torch.zeros(sinks.shape[0], dtype=torch.float32)
    _ext.add_sink_grads(out, lse, dout, sinks, mine)
    every = [torch.empty_like(mine) for _ in range(ring.size)]
    dist.all_gather(every, mine, group=ring.group)
    total = every[0].clone()
    for share in every[1:]:
        total += share
    return total


@_core.with_options(exclude=("mask",))
def ring_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, group=None, layout: str = "zigzag",
                   **options) -> torch.Tensor:
    """Attention over a sequence sharded across the ranks of ``group``, with autograd.

    q ``[B, Hq, Nq_local, Dk]``, k ``[B, Hkv, Nk_local, Dk]``, v ``[B, Hkv, Nk_local, Dv]``: this rank's
    shards under ``layout`` (``shard`` cuts them). Returns this rank's shard of the output
    ``[B, Hq, Nq_local, Dv]``. ``causal`` is None, 'top-left' or 'bottom-right' of the *whole*
    sequence; ``window`` (left, right) likewise. Every rank must call it with the same options.
    ``dropout_p``, ``dropout_seed``, ``dropout_offset`` as sdpa.attention's: the mask is the whole
    sequence's (each block draws it at its own positions), so the result is single-process
    ``sdpa.attention`` with the same seed and offset. ``sinks`` ``[Hq]`` float32 (a tensor; autograd
    reaches it): each row's sink merged once after every block, its gradient summed over the ranks.
    With ``dropout_seed=None`` every rank draws a
    seed from torch's default CPU generator and rank 0's is broadcast; an explicit seed must be the
    same on every rank (checked with the other options). float32 CPU tensors only; the transport is
    torch.distributed (gloo for CPU tensors).
    """
    _check_layout(layout)
    for name, x in (("q", q), ("k", k), ("v", v)):
        if not isinstance(x, torch.Tensor) or x.dtype != torch.float32 or x.device.type != "cpu" or x.ndim != 4:
            raise TypeError(f"{name}: expected a float32 CPU tensor [B, H, N_local, D]")
    if not dist.is_initialized():
        raise RuntimeError("ring_attention: torch.distributed is not initialised (init_process_group('gloo'))")
    ring = _Ring(q, k, v, group, layout, options)
    return _RingFunction.apply(q, k, v, ring.sinks, ring)

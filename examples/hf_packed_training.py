"""Padding-free training on sdpa: documents of different lengths packed into one row, no token wasted on padding.

    python examples/hf_packed_training.py

transformers' DataCollatorWithFlattening concatenates a batch's documents into one row whose position_ids restart
at each document; with use_cache=False a model masks that row document by document, and sdpa's backend
("exact_cpu") runs each layer's attention as one varlen call over the documents (no [N, N] mask formed, no score
across two documents computed), forward and backward. Builds a small random-weight Llama (nothing is downloaded),
checks the packed loss against the documents run one at a time, then takes a few optimiser steps on the packed row.
"""
import torch
import sdpa.transformers  # registers the backend sdpa.transformers.NAME == "exact_cpu"
from transformers import AutoModelForCausalLM, DataCollatorWithFlattening, LlamaConfig

cfg = LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, max_position_embeddings=256)
torch.manual_seed(0)
model = AutoModelForCausalLM.from_config(cfg, attn_implementation=sdpa.transformers.NAME)

gen = torch.Generator().manual_seed(1)
documents = [torch.randint(0, cfg.vocab_size, (n,), generator=gen).tolist() for n in (37, 12, 64, 5, 21)]
packed = DataCollatorWithFlattening()([{"input_ids": d} for d in documents])  # input_ids, labels, position_ids [1, T]
print("packed row:", tuple(packed["input_ids"].shape), "from documents of", [len(d) for d in documents], "tokens")

# the packed row's loss is the documents' losses together: each token sees its own document only
with torch.no_grad():
    together = model(**packed, use_cache=False).loss.item()
    sums = [model(torch.tensor([d]), labels=torch.tensor([d])).loss.item() * (len(d) - 1) for d in documents]
    alone = sum(sums) / sum(len(d) - 1 for d in documents)
print(f"packed loss {together:.6f}, documents one at a time {alone:.6f}, difference {abs(together - alone):.1e}")

optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
model.train()
for step in range(5):
    optimizer.zero_grad()
    loss = model(**packed, use_cache=False).loss
    loss.backward()
    optimizer.step()
    print(f"step {step}: loss {loss.item():.4f}")

"""Greedy generation from a Hugging Face model whose attention runs in sdpa ("exact_cpu").

    python examples/hf_generate.py                 # a small random-weight Llama, nothing downloaded
    python examples/hf_generate.py MODEL_DIR_OR_ID  # a checkpoint you have (from_pretrained)
"""
import sys

import torch
import sdpa.transformers  # registers the backend sdpa.transformers.NAME == "exact_cpu"
from transformers import AutoModelForCausalLM, LlamaConfig

if len(sys.argv) > 1:
    model = AutoModelForCausalLM.from_pretrained(sys.argv[1], attn_implementation=sdpa.transformers.NAME,
                                                 dtype=torch.float32)
else:
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=256, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2)
    model = AutoModelForCausalLM.from_config(cfg, attn_implementation=sdpa.transformers.NAME)
prompt = torch.randint(0, model.config.vocab_size, (1, 16), generator=torch.Generator().manual_seed(1))
with torch.no_grad():
    tokens = model.eval().generate(prompt, max_new_tokens=32, do_sample=False, pad_token_id=0)
print("attention:", model.config._attn_implementation, "| generated:", tokens[0, 16:].tolist())

"""gpt-oss's attention sinks on sdpa: one learned logit per head, a key with no value in every row's softmax.

    python examples/gpt_oss_sinks.py

Builds a small random-weight gpt-oss (a sliding-window layer and a full one, grouped-query attention;
nothing is downloaded), generates greedily with attention on sdpa ("exact_cpu", which takes the
model's sinks as `s_aux`) and with transformers' eager attention, and takes one training step's
gradient of the sinks through sdpa's backward. The direct call is sdpa.attention(q, k, v,
sinks=...) on NumPy arrays or tensors.
"""
import copy

import torch
import sdpa.transformers  # registers the backend sdpa.transformers.NAME == "exact_cpu"
from transformers import AutoModelForCausalLM, GptOssConfig

cfg = GptOssConfig(vocab_size=256, hidden_size=64, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                   num_key_value_heads=2, head_dim=16, num_local_experts=4, num_experts_per_tok=2, sliding_window=8,
                   layer_types=["sliding_attention", "full_attention"], max_position_embeddings=256)
torch.manual_seed(0)
model = AutoModelForCausalLM.from_config(copy.deepcopy(cfg), attn_implementation=sdpa.transformers.NAME)
with torch.no_grad():  # sinks start near 0; give them values that matter
    for name, param in model.named_parameters():
        if name.endswith(".sinks"):
            param.copy_(torch.linspace(-2.0, 2.0, param.numel()))
eager = AutoModelForCausalLM.from_config(copy.deepcopy(cfg), attn_implementation="eager")
eager.load_state_dict(model.state_dict())

prompt = torch.randint(0, cfg.vocab_size, (1, 12), generator=torch.Generator().manual_seed(1))
with torch.no_grad():
    ours = model.eval().generate(prompt, max_new_tokens=24, do_sample=False, pad_token_id=0)[0, 12:].tolist()
    theirs = eager.eval().generate(prompt, max_new_tokens=24, do_sample=False, pad_token_id=0)[0, 12:].tolist()

model.train()
model(prompt, labels=prompt).loss.backward()
sinks_grad = model.model.layers[0].self_attn.sinks.grad
print("sdpa tokens: ", ours)
print("eager tokens:", theirs)
print("same tokens:", ours == theirs, "| layer 0 sinks' gradient:", " ".join(f"{g:.3e}" for g in sinks_grad.tolist()))

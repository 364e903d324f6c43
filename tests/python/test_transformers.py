"""sdpa as a transformers attention backend ("exact_cpu") on small random-weight models built from configs.

Nothing is downloaded. Each model is built twice from the same weights: attn_implementation
"exact_cpu" (sdpa) and "eager" (transformers' reference attention, written out in PyTorch).
Judged by the project's rule: against the same model in float64 with eager attention (the
oracle), sdpa's fp32 error is at most twice eager-fp32's error plus the floor 8 eps (1 + smax)
at the scale of the quantity, smax bounding |score| over every attention call of the model
(recorded from the backend's own inputs: |scaling| max|q| max|k|, capped by the soft-cap).
Greedy generation must give eager's tokens, with the KV cache, plain and left-padded.
"""

import copy

import numpy as np
import pytest

torch = pytest.importorskip(
    "torch", reason="PyTorch is not importable: the transformers backend tests are skipped "
                    "(SDPA_PY_TORCH=1 bash scripts/python_test.sh installs torch in .venv)")
transformers = pytest.importorskip(
    "transformers", reason="transformers is not importable: the backend tests are skipped "
                           "(bash scripts/python_test.sh installs it in .venv)")

import sdpa.transformers as sht  # noqa: E402
from npref import EPS32, assert_within  # noqa: E402
from repo_scripts import run_script  # noqa: E402
from transformers import (AutoModel, AutoModelForCausalLM, BertConfig, DynamicCache, Gemma2Config,  # noqa: E402
                          GPT2Config, GptOssConfig, Llama4TextConfig, LlamaConfig, ModernBertConfig, Qwen2Config)
from transformers.cache_utils import DynamicLayer  # noqa: E402

VOCAB = 96


def _eager_experts(cfg):
    """A mixture-of-experts config whose experts run as plain loops: the grouped GEMM transformers picks by
    default refuses float64, which the oracle model needs."""
    cfg._experts_implementation = "eager"
    return cfg

SMALL = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4)

CONFIGS = {
    "llama-gqa": lambda: LlamaConfig(**SMALL, num_key_value_heads=2, max_position_embeddings=128),
    # one full layer, then one with a window of 6: prompts and generations run past it
    "qwen2-window": lambda: Qwen2Config(**SMALL, num_key_value_heads=2, use_sliding_window=True, sliding_window=6,
                                        max_window_layers=1, max_position_embeddings=128),
    # a soft-cap of 1 keeps tanh far from linear on these scores; window 6 on the sliding layers
    "gemma2-softcap-window": lambda: Gemma2Config(**SMALL, num_key_value_heads=2, head_dim=16, sliding_window=6,
                                                  attn_logit_softcapping=1.0, query_pre_attn_scalar=16,
                                                  max_position_embeddings=128),
    "gpt2": lambda: GPT2Config(vocab_size=VOCAB, n_embd=64, n_layer=2, n_head=4, n_positions=128, attn_pdrop=0.0,
                               resid_pdrop=0.0, embd_pdrop=0.0),
    # attention sinks (s_aux, one learned logit per head), GQA, a sliding layer (window 6) then a full one; its
    # MoE routes every token to both experts, so no rounding can flip a discrete choice of expert
    "gpt-oss-sinks": lambda: _eager_experts(GptOssConfig(
        vocab_size=VOCAB, hidden_size=64, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=16, num_local_experts=2, num_experts_per_tok=2, sliding_window=6,
        layer_types=["sliding_attention", "full_attention"], max_position_embeddings=128)),
    # Llama 4: a chunked layer (chunks of 8 positions, RoPE) then a full one (no RoPE); no MoE layer (a step of 4)
    "llama4-chunked": lambda: Llama4TextConfig(**SMALL, intermediate_size_mlp=128, num_key_value_heads=2, head_dim=16,
                                               attention_chunk_size=8, no_rope_layer_interval=2,
                                               interleave_moe_layer_step=4, max_position_embeddings=128),
}
DECODERS = list(CONFIGS)


class SmaxSpy:
    """Wraps the backend's three routes (the full one, sdpa.attention, the inference one, and sdpa.attention_varlen
    for a packed batch) to record smax, the bound on |score| of every attention call."""

    def __init__(self):
        self.smax = 0.0

    def record(self, q, k, scale, softcap, mask):
        beta = abs(scale) if scale is not None else q.shape[-1] ** -0.5
        s = beta * q.detach().abs().max().item() * k.detach().abs().max().item()
        if softcap is not None:
            s = min(s, softcap)
        if mask is not None and mask.dtype != torch.bool:
            finite = mask[torch.isfinite(mask)]
            s += finite.abs().max().item() if finite.numel() else 0.0
        self.smax = max(self.smax, s)

    def __enter__(self):
        self._full, self._inference, self._varlen = sht._api.attention, sht._inference, sht._api.attention_varlen

        def full(q, k, v, *, scale=None, softcap=None, mask=None, **kw):
            self.record(q, k, scale, softcap, mask)
            return self._full(q, k, v, scale=scale, softcap=softcap, mask=mask, **kw)

        def inference(q, k, v, mask, sinks, scale, causal, window, softcap):
            self.record(q, k, scale, softcap, mask)
            return self._inference(q, k, v, mask, sinks, scale, causal, window, softcap)

        def varlen(q, k, v, cu_q, cu_k, *, scale=None, softcap=None, mask=None, **kw):
            self.record(q, k, scale, softcap, mask)
            return self._varlen(q, k, v, cu_q, cu_k, scale=scale, softcap=softcap, mask=mask, **kw)

        sht._api.attention, sht._inference, sht._api.attention_varlen = full, inference, varlen
        return self

    def __exit__(self, *exc):
        sht._api.attention, sht._inference, sht._api.attention_varlen = self._full, self._inference, self._varlen


def _models(name, cls=AutoModelForCausalLM):
    """(sdpa, eager fp32, eager fp64) with the same random weights; each its own copy of the config (from_config
    records the attention choice in the config object)."""
    cfg = CONFIGS[name]() if isinstance(name, str) else name
    torch.manual_seed(0)
    ours = cls.from_config(copy.deepcopy(cfg), attn_implementation=sht.NAME)
    assert ours.config._attn_implementation == sht.NAME
    with torch.no_grad():  # sinks initialise near 0 (std 0.02); spread them so that they matter: N(0, 1.5²)
        for name, param in ours.named_parameters():
            if name.endswith(".sinks"):
                param.copy_(1.5 * torch.randn(param.shape, generator=torch.Generator().manual_seed(len(name))))
    eager = cls.from_config(copy.deepcopy(cfg), attn_implementation="eager")
    eager.load_state_dict(ours.state_dict())
    gold = cls.from_config(copy.deepcopy(cfg), attn_implementation="eager").double()
    gold.load_state_dict(ours.state_dict())
    return ours.eval(), eager.eval(), gold.eval()


def _ids(seed, B, N):
    return torch.randint(0, VOCAB, (B, N), generator=torch.Generator().manual_seed(seed))


def _check(name, ours, eager, gold, smax):
    """The rule on a tensor."""
    ours, eager, gold = (t.detach().double().numpy() for t in (ours, eager, gold))
    floor = 8 * EPS32 * (1 + smax) * np.abs(gold).max()
    assert_within(name, ours, eager, gold, floor)


@pytest.mark.parametrize("name", DECODERS)
def test_logits_against_eager(name):
    ours, eager, gold = _models(name)
    ids = _ids(1, 2, 20)
    with torch.no_grad(), SmaxSpy() as spy:
        got = ours(ids).logits
    with torch.no_grad():
        _check("logits", got, eager(ids).logits, gold(ids).logits, spy.smax)
    assert spy.smax > 0  # the backend did run


@pytest.mark.parametrize("name", ["llama-gqa", "qwen2-window", "gemma2-softcap-window", "llama4-chunked"])
def test_chunked_prefill_with_cache(name):
    """A prompt fed in two chunks through the KV cache (the second chunk's queries are bottom-right aligned
    against all keys so far, and the window slides across the chunk boundary) gives the one-pass logits."""
    ours, eager, gold = _models(name)
    ids = _ids(2, 1, 20)
    with torch.no_grad(), SmaxSpy() as spy:
        cache = DynamicCache(config=ours.config)
        ours(ids[:, :11], use_cache=True, **{sht._CACHE_KWARG: cache})
        second = ours(ids[:, 11:], use_cache=True, **{sht._CACHE_KWARG: cache}).logits
    with torch.no_grad():
        _check("logits (second chunk)", second, eager(ids).logits[:, 11:], gold(ids).logits[:, 11:], spy.smax)


@pytest.mark.parametrize("name", DECODERS)
def test_greedy_generate_equals_eager(name):
    ours, eager, _ = _models(name)
    ids = _ids(3, 1, 9)
    kw = dict(max_new_tokens=32, do_sample=False, pad_token_id=0)
    with torch.no_grad():
        got = ours.generate(ids, **kw)
        want = eager.generate(ids, **kw)
    assert got.shape == (1, 9 + 32)
    assert torch.equal(got, want)


@pytest.mark.parametrize("name", ["llama-gqa", "qwen2-window", "gemma2-softcap-window", "llama4-chunked"])
def test_left_padded_batch(name):
    """Two prompts of 13 and 7 tokens, the shorter left-padded: logits on real tokens and greedy tokens
    as eager's. The oracle is each prompt alone in float64 (eager in float64 turns the padded rows into
    NaN, which reach the real rows through 0 * NaN); positions count real tokens only, as generate()
    sets them. Padded query rows see no key: sdpa gives them 0 where eager averages, so they are not
    compared (no real token reads them)."""
    ours, eager, gold = _models(name)
    ids = _ids(4, 2, 13)
    attn = torch.ones_like(ids)
    attn[1, :6] = 0
    ids[1, :6] = 0
    pos = (attn.cumsum(-1) - 1).clamp(min=0)
    keep = attn.bool()
    with torch.no_grad(), SmaxSpy() as spy:
        got = ours(ids, attention_mask=attn, position_ids=pos).logits
    with torch.no_grad():
        want = eager(ids, attention_mask=attn, position_ids=pos).logits
        oracle = torch.cat([gold(ids[b][keep[b]][None]).logits[0] for b in range(2)])
        _check("logits (padded batch)", got[keep], want[keep], oracle, spy.smax)
        kw = dict(attention_mask=attn, max_new_tokens=32, do_sample=False, pad_token_id=0)
        assert torch.equal(ours.generate(ids, **kw), eager.generate(ids, **kw))


def _check_training_step(ours, eager, gold, ids, **inputs):
    """One step of the LM loss on ids (and inputs) in each model: every parameter's gradient by the rule."""
    def grads(model):
        model.train()
        model.zero_grad()
        model(ids, labels=ids, **inputs).loss.backward()
        return {n: p.grad for n, p in model.named_parameters() if p.grad is not None}

    with SmaxSpy() as spy:
        g_ours = grads(ours)
    g_eager, g_gold = grads(eager), grads(gold)
    assert g_ours.keys() == g_gold.keys() and len(g_ours) > 4
    for n in g_gold:
        _check(n, g_ours[n], g_eager[n], g_gold[n], spy.smax)


@pytest.mark.parametrize("name", DECODERS)
def test_training_step_gradients(name):
    ours, eager, gold = _models(name)
    _check_training_step(ours, eager, gold, _ids(5, 2, 16))


def test_bert_encoder_with_padding():
    """Bidirectional attention with a padding mask: the padded keys take no part. The oracle for the padded
    sequence is the same sequence alone, in float64 (absolute positions are the same: padding is on the right)."""
    cfg = BertConfig(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                     num_attention_heads=4, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    ours, eager, gold = _models(cfg, cls=AutoModel)
    ids = _ids(6, 2, 15)
    attn = torch.ones_like(ids)
    attn[0, 9:] = 0
    keep = attn.bool()
    with torch.no_grad(), SmaxSpy() as spy:
        got = ours(ids, attention_mask=attn).last_hidden_state
    with torch.no_grad():
        want = eager(ids, attention_mask=attn).last_hidden_state
        oracle = torch.cat([gold(ids[b][keep[b]][None]).last_hidden_state[0] for b in range(2)])
        _check("hidden states", got[keep], want[keep], oracle, spy.smax)
    assert spy.smax > 0


class _Layer:  # what attention_forward reads of a module
    is_causal = True


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_inference_route_gives_the_full_routes_bits(dtype):
    """In inference (no_grad) the backend takes its cached-options route: the same bits as sdpa.attention on
    the same call (decoding, prefill with its causal mask, a padded batch's bool mask, sinks, a window with
    soft-cap), out contiguous in the [B, Nq, Hq, D] layout the model reads; with autograd, the full route."""
    g = torch.Generator().manual_seed(3)

    def full(q, k, v, **kw):
        return sht._api.attention(q, k, v, **kw).transpose(1, 2)

    def both(q, k, v, mask=None, **kw):
        sinks = kw.get("s_aux")
        with torch.no_grad():
            got, _ = sht.attention_forward(_Layer(), q, k, v, mask, **kw)
            causal = "top-left" if mask is None and q.shape[2] > 1 else None
            window = None if kw.get("sliding_window") is None or causal is None else (kw["sliding_window"] - 1, 0)
            want = full(q, k, v, scale=kw.get("scaling"), causal=causal, window=window, softcap=kw.get("softcap"),
                        mask=mask, sinks=sinks)
        assert got.is_contiguous() and got.shape == want.shape, (got.shape, got.stride())
        assert torch.equal(got, want)

    def qkv(B, Nq, Nk):
        q = torch.randn(B, Nq, 6, 16, generator=g).to(dtype).transpose(1, 2)  # a projection's view, as in a model
        return q, torch.randn(B, 2, Nk, 16, generator=g).to(dtype), torch.randn(B, 2, Nk, 16, generator=g).to(dtype)

    before = sht._core._scalar_options.cache_info().hits
    both(*qkv(1, 1, 37), scaling=0.3)  # decoding
    both(*qkv(1, 1, 37), scaling=0.3)  # the same layer again: its options from the cache
    assert sht._core._scalar_options.cache_info().hits > before
    both(*qkv(2, 9, 9), scaling=0.25, sliding_window=4, softcap=3.0)  # prefill, window and soft-cap
    keep = torch.ones(2, 1, 1, 21, dtype=torch.bool)
    keep[1, :, :, :5] = False  # sequence 1 left-padded
    both(*qkv(2, 1, 21), mask=keep)
    both(*qkv(1, 1, 21), s_aux=torch.tensor([0.5, -1.0, 2.0, 0.0, 1.0, -0.5]))
    # With autograd the full route (and its custom op's autograd) runs.
    taken = []
    orig = sht._api.attention
    sht._api.attention = lambda *a, **kw: taken.append(1) or orig(*a, **kw)
    try:
        q, k, v = (x.requires_grad_() for x in qkv(1, 3, 3))
        sht.attention_forward(_Layer(), q, k, v, None)[0].sum().backward()
    finally:
        sht._api.attention = orig
    assert taken and q.grad is not None


FORMED = "exact_cpu_formed"  # the backend with transformers' sdpa_mask: every mask formed as booleans
transformers.AttentionInterface.register(FORMED, sht.attention_forward)
transformers.AttentionMaskInterface.register(FORMED, transformers.masking_utils.sdpa_mask)


def _padding_mask(kind, kv_offset, kv_length):
    """A 2D padding mask [2, kv_offset + kv_length] as transformers hands it to a mask builder: None; "ones" (no
    pad); "left" (the second sequence's positions up to kv_offset + 2 hidden); "right" (the first sequence's last
    3); "short" (one position shorter than the keys: sdpa_mask pads it with zeros)."""
    if kind is None:
        return None
    mask = torch.ones(2, kv_offset + kv_length - (kind == "short"), dtype=torch.long)
    if kind == "left":
        mask[1, :kv_offset + 2] = 0
    elif kind == "right":
        mask[0, kv_offset + kv_length - 3:] = 0
    return mask


def test_build_mask_is_sdpa_mask():
    """build_mask gives sdpa_mask's result (None where it gives None, the same booleans) over causal and sliding
    patterns, offsets, key padding (a short padding mask too) and the skip flag, as a PatternMask."""
    import inspect
    from transformers.masking_utils import causal_mask_function, sliding_window_causal_mask_function, sdpa_mask
    assert sht._PATTERNS, "this transformers' sdpa_mask takes other arguments: exact_cpu registered sdpa_mask itself"
    assert tuple(inspect.signature(sht.build_mask).parameters)[:len(sht._MASK_ARGS)] == sht._MASK_ARGS

    def sdpa_mask_of_5_3(batch_size, cache_position, kv_length, kv_offset=0, mask_function=None, attention_mask=None,
                         local_size=None, allow_is_causal_skip=True, allow_torch_fix=True, **kwargs):
        pass  # the signature of transformers 4.53 to 5.3's sdpa_mask: build_mask is not registered over it
    assert not sht._forwards_to(sdpa_mask_of_5_3)
    patterns = 0
    for nq, kv_length, q_offset, kv_offset in [(7, 7, 0, 0), (5, 12, 7, 0), (1, 10, 9, 0), (4, 9, 10, 5),
                                               (1, 6, 30, 25), (3, 40, 0, 0)]:
        for window in (None, 3, 6, 64):
            for padding in (None, "ones", "left", "short"):
                for skip in (True, False):
                    attention_mask = _padding_mask(padding, kv_offset, kv_length)
                    kw = dict(batch_size=2, q_length=nq, kv_length=kv_length, q_offset=q_offset, kv_offset=kv_offset,
                              mask_function=(causal_mask_function if window is None
                                             else sliding_window_causal_mask_function(window)),
                              attention_mask=attention_mask, local_size=window, allow_is_causal_skip=skip)
                    want, got = sdpa_mask(**kw), sht.build_mask(**kw)
                    where = f"{kw}"
                    if want is None:  # (a release whose skip test build_mask cannot call gets a PatternMask)
                        assert got is None or sht._ignore_causal_mask_sdpa is None, where
                        continue
                    assert isinstance(got, sht.PatternMask), where
                    assert (got.padding is None) == (padding in (None, "ones")), where
                    patterns += 1
                    assert got.shape == want.shape and torch.equal(got, want), where
                    assert torch.equal(got[:, :, :, :3], want[:, :, :, :3])  # any op sees the booleans
    assert patterns > 80
    # a mask function of the model's own (here: causal with a changed meaning) is never taken for the pattern
    odd = lambda b, h, q, kv: kv < q  # noqa: E731
    kw = dict(batch_size=1, q_length=4, kv_length=4, mask_function=odd, allow_is_causal_skip=False)
    assert not isinstance(sht.build_mask(**kw), sht.PatternMask)
    assert torch.equal(sht.build_mask(**kw), sdpa_mask(**kw))


def test_build_mask_is_sdpa_mask_bidirectional():
    """The same for an encoder's masks: bidirectional, and bidirectional with a sliding window (|q - kv| <= W,
    ModernBERT's local layers), with transformers' arguments for them (no causal skip; the bidirectional skip,
    local_size the window), over offsets and key padding; the kernel options say the window about the
    bottom-right diagonal alone, dense() elsewhere."""
    from transformers.masking_utils import bidirectional_mask_function, sliding_window_bidirectional_mask_function
    assert sht._ignore_bidirectional_mask_sdpa is not None
    patterns = windows = 0
    for nq, kv_length, q_offset, kv_offset in [(7, 7, 0, 0), (16, 16, 0, 0), (5, 12, 7, 0), (4, 9, 10, 5),
                                               (3, 40, 0, 0)]:
        for window in (None, 2, 5, 64):
            for padding in (None, "ones", "left", "right", "short"):
                for skip in (True, False):
                    attention_mask = _padding_mask(padding, kv_offset, kv_length)
                    kw = dict(batch_size=2, q_length=nq, kv_length=kv_length, q_offset=q_offset, kv_offset=kv_offset,
                              mask_function=(bidirectional_mask_function if window is None
                                             else sliding_window_bidirectional_mask_function(window)),
                              attention_mask=attention_mask, local_size=window, allow_is_causal_skip=False,
                              allow_is_bidirectional_skip=skip)
                    want, got = transformers.masking_utils.sdpa_mask(**kw), sht.build_mask(**kw)
                    where = f"{kw}"
                    if want is None:
                        assert got is None, where
                        continue
                    assert isinstance(got, sht.PatternMask) and not got.causal, where
                    assert (got.padding is None) == (padding in (None, "ones")), where
                    patterns += 1
                    options = got.kernel_options(nq, kv_length)
                    if window is not None and q_offset - kv_offset != kv_length - nq:
                        assert options is None, where  # the kernel centres a window on the bottom-right diagonal
                    else:
                        assert options[:2] == (None, None if window is None else (window, window)), where
                        windows += window is not None
                    assert got.shape == want.shape and torch.equal(got, want), where
    assert patterns > 60 and windows > 20


def _modernbert(attn_implementation):
    """A two-layer ModernBERT whose first layer is local (bidirectional window of 4 each side) and second global;
    its dropouts off. Built from the same seed each time: the same weights."""
    cfg = ModernBertConfig(vocab_size=VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                           num_attention_heads=4, local_attention=8,
                           layer_types=["sliding_attention", "full_attention"],
                           pad_token_id=0, bos_token_id=1, eos_token_id=2, cls_token_id=1, sep_token_id=2,
                           max_position_embeddings=128)
    torch.manual_seed(0)
    return AutoModel.from_config(cfg, attn_implementation=attn_implementation).eval()


def test_encoder_pattern_masks():
    """ModernBERT over a right-padded batch longer than its local window: the local layer's mask reaches the backend
    as a bidirectional PatternMask read as the kernel's window (4, 4) and the key padding, the global layer's as the
    padding alone; the same bits as the formed masks, and within the rule against eager (the oracle each sequence
    alone in float64)."""
    ours, formed, eager = (_modernbert(a) for a in (sht.NAME, FORMED, "eager"))
    gold = _modernbert("eager").double()
    ids = _ids(13, 2, 24)
    attn = torch.ones_like(ids)
    attn[1, 15:], ids[1, 15:] = 0, 0
    keep = attn.bool()
    seen = []
    orig = sht.attention_forward

    def spy(module, q, k, v, mask, *args, **kw):
        if isinstance(mask, sht.PatternMask):
            seen.append((mask, mask.kernel_options(q.shape[2], k.shape[2])))
        return orig(module, q, k, v, mask, *args, **kw)

    transformers.AttentionInterface.register(sht.NAME, spy)
    try:
        with torch.no_grad(), SmaxSpy() as spy_smax:
            got = ours(ids, attention_mask=attn).last_hidden_state
    finally:
        transformers.AttentionInterface.register(sht.NAME, orig)
    with torch.no_grad():
        assert torch.equal(got, formed(ids, attention_mask=attn).last_hidden_state)
        want = eager(ids, attention_mask=attn).last_hidden_state
        oracle = torch.cat([gold(ids[b][keep[b]][None]).last_hidden_state[0] for b in range(2)])
    _check("hidden states", got[keep], want[keep], oracle, spy_smax.smax)
    options = sorted(((o[0], o[1]) for _, o in seen), key=str)  # one call a layer
    assert options == [(None, (4, 4)), (None, None)], options
    assert all(m._dense is None and m.padding is not None for m, _ in seen)
    with torch.no_grad():  # no padding: the global layer's mask is skipped (None), the local one stays a pattern
        assert torch.equal(ours(ids[:1]).last_hidden_state, formed(ids[:1]).last_hidden_state)


@pytest.mark.parametrize("name", ["qwen2-window", "gemma2-softcap-window", "gpt-oss-sinks", "llama-gqa"])
def test_pattern_masks_give_the_formed_masks_bits(name):
    """A prompt past the window and a chunk over the cache: the sliding layers (and the chunk's causal mask) reach
    the backend as PatternMask, read as the kernel's window and causal options without forming the booleans,
    with the bits the formed masks give; greedy tokens too."""
    ours, _, _ = _models(name)
    formed = AutoModelForCausalLM.from_config(copy.deepcopy(CONFIGS[name]()), attn_implementation=FORMED).eval()
    formed.load_state_dict(ours.state_dict())
    seen = []
    orig = sht.attention_forward

    def spy(module, q, k, v, mask, *args, **kw):
        if isinstance(mask, sht.PatternMask):
            seen.append(mask)
        return orig(module, q, k, v, mask, *args, **kw)

    transformers.AttentionInterface.register(sht.NAME, spy)
    try:
        ids = _ids(11, 1, 20)
        with torch.no_grad():
            assert torch.equal(ours(ids).logits, formed(ids).logits)
            got, want = (DynamicCache(config=m.config) for m in (ours, formed))
            for m, cache in ((ours, got), (formed, want)):
                m(ids[:, :11], use_cache=True, **{sht._CACHE_KWARG: cache})
            assert torch.equal(ours(ids[:, 11:], use_cache=True, **{sht._CACHE_KWARG: got}).logits,
                               formed(ids[:, 11:], use_cache=True, **{sht._CACHE_KWARG: want}).logits)
            kw = dict(max_new_tokens=12, do_sample=False, pad_token_id=0)
            assert torch.equal(ours.generate(ids[:, :9], **kw), formed.generate(ids[:, :9], **kw))
            # a left-padded batch: the key padding reaches the kernel as [B, 1, 1, Nk] beside the window
            batch = _ids(12, 2, 20)
            attn = torch.ones_like(batch)
            attn[1, :7], batch[1, :7] = 0, 0
            pos = (attn.cumsum(-1) - 1).clamp(min=0)
            assert torch.equal(ours(batch, attention_mask=attn, position_ids=pos).logits,
                               formed(batch, attention_mask=attn, position_ids=pos).logits)
            kw["attention_mask"] = attn
            assert torch.equal(ours.generate(batch, **kw), formed.generate(batch, **kw))
    finally:
        transformers.AttentionInterface.register(sht.NAME, orig)
    assert seen and all(m._dense is None for m in seen)
    assert any(m.padding is not None for m in seen)
    if name != "llama-gqa":
        assert any(m.window is not None for m in seen)


def _attended(mask, nq, nk):
    """The booleans [B, 1, nq, nk] that the kernel calls of mask.pieces(nq, nk) attend with: each call's rows over
    its keys, bottom-right causal, and its key padding; nothing outside the calls."""
    seen = torch.zeros(mask.shape[0], 1, nq, nk, dtype=torch.bool)
    rows_taken = torch.zeros(nq, dtype=torch.bool)
    for rows, keys, causal, window, keep in mask.pieces(nq, nk):
        assert causal == "bottom-right" and window is None
        r, k = torch.arange(nq)[rows], torch.arange(nk)[keys]
        assert not rows_taken[r].any()  # each row in one call
        rows_taken[r] = True
        block = torch.ones(len(r), len(k), dtype=torch.bool).tril(len(k) - len(r))
        seen[:, :, r[0]:r[-1] + 1, k[0]:k[-1] + 1] = block if keep is None else block & keep
    assert rows_taken.all()
    return seen


def test_build_mask_is_sdpa_mask_chunked():
    """Llama 4's chunked layers: build_mask gives sdpa_mask's result for chunked_causal_mask_function over a prefill
    across chunks, chunks over the sliding cache, decoding steps at and past a chunk's edge, chunk sizes 8 and 3, key
    padding and the skip flag: a PatternMask where no sequence is left-padded (a left-padded one's chunks start at
    its first token: formed), whose kernel calls (pieces) attend with exactly its booleans."""
    from transformers.masking_utils import chunked_causal_mask_function, sdpa_mask
    patterns = several = 0
    for nq, kv_length, q_offset, kv_offset in [(20, 20, 0, 0), (9, 16, 11, 4), (5, 12, 7, 0), (1, 8, 15, 8),
                                               (1, 8, 16, 9), (1, 5, 4, 0), (3, 40, 0, 0), (4, 6, 5, 7), (2, 4, 5, 0)]:
        for chunk in (8, 3):
            for padding in (None, "ones", "left", "right", "short"):
                for skip in (True, False):
                    attention_mask = _padding_mask(padding, kv_offset, kv_length)
                    left = (torch.zeros(2, dtype=torch.long) if attention_mask is None
                            else (attention_mask.cumsum(-1) == 0).sum(-1))  # as create_chunked_causal_mask counts
                    kw = dict(batch_size=2, q_length=nq, kv_length=kv_length, q_offset=q_offset, kv_offset=kv_offset,
                              mask_function=chunked_causal_mask_function(chunk, left), attention_mask=attention_mask,
                              local_size=chunk, allow_is_causal_skip=skip)
                    want, got = sdpa_mask(**kw), sht.build_mask(**kw)
                    where = f"{kw}"
                    if want is None:
                        assert got is None, where
                        continue
                    assert got.shape == want.shape and torch.equal(got, want), where
                    assert isinstance(got, sht.PatternMask) == (padding != "left"), where
                    if padding == "left":
                        continue
                    patterns += 1
                    got = sht.build_mask(**kw)  # not yet formed
                    assert got.chunk == chunk and got.kernel_options(nq, kv_length) is None, where
                    if q_offset < kv_offset or q_offset + nq > kv_offset + kv_length:  # rows before the first
                        # key or past the last: no calls say them (dense())
                        assert got.pieces(nq, kv_length) is None, where
                        continue
                    several += len(got.pieces(nq, kv_length)) > 1
                    assert torch.equal(_attended(got, nq, kv_length), want), where
                    assert got._dense is None, where
    assert patterns > 80 and several > 30


def test_chunked_layers_as_pattern_masks():
    """Llama 4 through exact_cpu: its chunked layer's masks reach the backend as PatternMasks, never formed, over a
    prompt across three chunks, a second chunk over the sliding cache and greedy decoding; a call for each chunk
    the queries touch, a decoding step's over its own chunk's keys alone (at most 8 of the cache's); logits within
    the rule against the float64 oracle, and eager's greedy tokens."""
    ours, eager, gold = _models("llama4-chunked")
    seen = []
    orig = sht.attention_forward

    def spy(module, q, k, v, mask, *args, **kw):
        if isinstance(mask, sht.PatternMask) and mask.chunk is not None:
            seen.append((mask, mask.pieces(q.shape[2], k.shape[2])))
        return orig(module, q, k, v, mask, *args, **kw)

    ids = _ids(12, 1, 20)
    kw = dict(max_new_tokens=24, do_sample=False, pad_token_id=0)
    transformers.AttentionInterface.register(sht.NAME, spy)
    try:
        with torch.no_grad(), SmaxSpy() as smax:
            got = ours(ids).logits
            cache = DynamicCache(config=ours.config)
            ours(ids[:, :11], use_cache=True, **{sht._CACHE_KWARG: cache})
            second = ours(ids[:, 11:], use_cache=True, **{sht._CACHE_KWARG: cache}).logits
            tokens = ours.generate(ids[:, :9], **kw)
    finally:
        transformers.AttentionInterface.register(sht.NAME, orig)
    with torch.no_grad():
        _check("logits", got, eager(ids).logits, gold(ids).logits, smax.smax)
        _check("logits (second chunk)", second, eager(ids).logits[:, 11:], gold(ids).logits[:, 11:], smax.smax)
        assert torch.equal(tokens, eager.generate(ids[:, :9], **kw))
    assert all(m._dense is None for m, _ in seen)
    calls = [len(pieces) for _, pieces in seen]
    assert calls[:3] == [3, 2, 2], calls  # 20 tokens; 11 (positions 0-10); 9 more (11-19) over the cache
    steps = [pieces for m, pieces in seen if m.shape[2] == 1]
    assert len(steps) >= 20 and all(len(p) == 1 and p[0][1].stop - p[0][1].start <= 8 for p in steps)
    assert any(p[0][1].stop - p[0][1].start < 8 for p in steps)  # a step early in its chunk reads fewer


def _packed_positions(lengths):
    """position_ids [B, N] of rows packed from sequences of these lengths (each row's lengths summing to N),
    restarting at 0 at each sequence, as a padding-free collator gives them."""
    return torch.stack([torch.cat([torch.arange(n) for n in row]) for row in lengths])


def test_build_mask_is_sdpa_mask_packed():
    """A packed batch's mask (and_masks(remap_positions_for_packed_sequence(f, position_ids),
    packed_sequence_mask_function(index)), causal with and without a window): build_mask gives sdpa_mask's booleans
    as a packed PatternMask, whose varlen offsets start a sequence wherever the positions restart, row after row."""
    from transformers.masking_utils import (and_masks, causal_mask_function, find_packed_sequence_indices,
                                            packed_sequence_mask_function, remap_positions_for_packed_sequence,
                                            sdpa_mask, sliding_window_causal_mask_function)
    for lengths in ([[10, 12, 8]], [[10, 12, 8], [25, 5]], [[30], [1, 29]], [[1] * 6, [6]]):
        positions = _packed_positions(lengths)
        batch, n = positions.shape
        index = find_packed_sequence_indices(positions)
        starts = [b * n + sum(row[:i]) for b, row in enumerate(lengths) for i in range(len(row))]
        for window in (None, 3):
            base = causal_mask_function if window is None else sliding_window_causal_mask_function(window)
            kw = dict(batch_size=batch, q_length=n, kv_length=n, allow_is_causal_skip=False,
                      mask_function=and_masks(remap_positions_for_packed_sequence(base, positions),
                                              packed_sequence_mask_function(index)))
            want, got = sdpa_mask(**kw), sht.build_mask(**kw)
            where = f"{lengths}, window {window}"
            assert isinstance(got, sht.PatternMask) and got.packed is not None and got.window == window, where
            assert got.offsets().tolist() == starts + [batch * n] and got.offsets().dtype == torch.int32, where
            assert got.pieces(n, n) is None and got.kernel_options(n, n) is None, where
            assert got.shape == want.shape and torch.equal(got, want), where


@pytest.mark.parametrize("name", ["llama-gqa", "qwen2-window", "gemma2-softcap-window"])
def test_packed_batch_as_one_varlen_call(name):
    """A padding-free packed batch (position_ids restarting at each sequence, no attention mask, no cache:
    transformers' packed format) reaches the backend as packed PatternMasks, never formed, each run as one varlen
    call: each sequence's logits within the rule against that sequence alone in the float64 model (eager's packed
    logits the reference), and one training step's gradients against the float64 model's on the packed batch."""
    ours, eager, gold = _models(name)
    lengths = [[10, 12, 8], [25, 5]]
    positions, ids = _packed_positions(lengths), _ids(14, 2, 30)
    seen = []
    orig = sht.attention_forward

    def spy(module, q, k, v, mask, *args, **kw):
        seen.append(mask)
        return orig(module, q, k, v, mask, *args, **kw)

    transformers.AttentionInterface.register(sht.NAME, spy)
    try:
        with torch.no_grad(), SmaxSpy() as smax:
            got = ours(ids, position_ids=positions, use_cache=False).logits
    finally:
        transformers.AttentionInterface.register(sht.NAME, orig)
    assert len(seen) == 2 and all(isinstance(m, sht.PatternMask) and m.packed is not None for m in seen), seen
    assert all(m._dense is None for m in seen)
    with torch.no_grad():
        want = eager(ids, position_ids=positions, use_cache=False).logits
        oracle = torch.cat([gold(ids[b:b + 1, s:s + n]).logits[0] for b, row in enumerate(lengths)
                            for s, n in zip(np.cumsum([0] + row[:-1]), row)])
    _check("logits (packed)", got.reshape(-1, VOCAB), want.reshape(-1, VOCAB), oracle, smax.smax)
    _check_training_step(ours, eager, gold, ids, position_ids=positions, use_cache=False)


def test_pattern_mask_window_without_the_sliding_window_argument():
    """A model that passes its sliding layers' mask but not `sliding_window` still gets the window: it is the
    PatternMask's own. Same bits as the formed mask."""
    from transformers.masking_utils import sliding_window_causal_mask_function
    g = torch.Generator().manual_seed(5)
    q = torch.randn(1, 4, 16, 8, generator=g)
    k, v = torch.randn(1, 2, 16, 8, generator=g), torch.randn(1, 2, 16, 8, generator=g)
    mask = sht.build_mask(batch_size=1, q_length=16, kv_length=16, mask_function=sliding_window_causal_mask_function(5),
                          local_size=5)
    assert isinstance(mask, sht.PatternMask) and mask.kernel_options(16, 16) == ("bottom-right", (4, 0), None)
    with torch.no_grad():
        got, _ = sht.attention_forward(_Layer(), q, k, v, mask)
        want, _ = sht.attention_forward(_Layer(), q, k, v, mask.dense().clone())
        full, _ = sht.attention_forward(_Layer(), q, k, v, None)  # causal alone: not the same
    assert mask._dense is not None  # formed by the second call only
    assert torch.equal(got, want) and not torch.equal(got, full)


def test_bidirectional_pattern_mask_on_a_causal_module():
    """A bidirectional mask that hides nothing, handed to a module that calls itself causal: the mask says every key
    is seen (as the formed all-True mask does), so no causal option is added."""
    from transformers.masking_utils import bidirectional_mask_function
    g = torch.Generator().manual_seed(6)
    q = torch.randn(1, 4, 12, 8, generator=g)
    k, v = torch.randn(1, 2, 12, 8, generator=g), torch.randn(1, 2, 12, 8, generator=g)
    mask = sht.build_mask(batch_size=1, q_length=12, kv_length=12, mask_function=bidirectional_mask_function,
                          allow_is_causal_skip=False, allow_is_bidirectional_skip=False)
    assert isinstance(mask, sht.PatternMask) and mask.kernel_options(12, 12) == (None, None, None)
    with torch.no_grad():
        got, _ = sht.attention_forward(_Layer(), q, k, v, mask)
        want, _ = sht.attention_forward(_Layer(), q, k, v, mask.dense().clone())
        causal, _ = sht.attention_forward(_Layer(), q, k, v, None)
    assert torch.equal(got, want) and not torch.equal(got, causal)


def test_set_attn_implementation_and_errors():
    ours, eager, _ = _models("llama-gqa")
    eager.set_attn_implementation(sht.NAME)
    assert eager.config._attn_implementation == sht.NAME
    ids = _ids(7, 1, 8)
    with torch.no_grad():
        assert torch.equal(ours(ids).logits, eager(ids).logits)
    with pytest.raises(TypeError, match=r"^query: dtype torch.float64 is not supported"), torch.no_grad():
        ours.double()(ids)
    q = torch.zeros(1, 4, 3, 16)
    with pytest.raises(ValueError, match=r"^dropout: must be in \[0, 1\), got 1.5"):
        sht.attention_forward(ours, q, q, q, None, dropout=1.5)
    with pytest.raises(ValueError, match=r"^attention_mask: shape \[1, 1, 4, 3\] does not broadcast"):
        sht.attention_forward(ours, q, q, q, torch.ones(1, 1, 4, 3, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"^query: tensor is on device 'meta'"):
        sht.attention_forward(ours, q.to("meta"), q, q, None)
    with pytest.raises(ImportError, match=r"needs transformers >= 4\.53\.0 .* found 4\.40\.2"):
        sht._check_version("4.40.2")
    sht._check_version(sht.MIN_TRANSFORMERS)
    sht._check_version("5.0.0.dev0")


def test_example_hf_generate_runs():
    """examples/hf_generate.py (the README's example) runs as shipped."""
    res = run_script("examples/hf_generate.py")
    assert res.returncode == 0, res.stderr[-3000:]
    last = res.stdout.strip().splitlines()[-1]
    assert last.startswith(f"attention: {sht.NAME} | generated: [") and last.count(",") == 31


def test_example_gpt_oss_sinks_runs():
    """examples/gpt_oss_sinks.py runs as shipped: sdpa's tokens are eager's, and the sinks get a gradient."""
    res = run_script("examples/gpt_oss_sinks.py")
    assert res.returncode == 0, res.stderr[-3000:]
    last = res.stdout.strip().splitlines()[-1]
    assert last.startswith("same tokens: True | layer 0 sinks' gradient: ")
    grads = [float(g) for g in last.split("gradient: ")[1].split()]
    assert len(grads) == 4 and any(g != 0.0 for g in grads)


def test_example_hf_packed_training_runs():
    """examples/hf_packed_training.py runs as shipped: the packed row's loss is the documents' one at a time (within
    float32's rounding of a loss near 5.6), and five optimiser steps on the packed row lower it."""
    import re
    res = run_script("examples/hf_packed_training.py")
    assert res.returncode == 0, res.stderr[-3000:]
    found = re.search(r"packed loss ([0-9.]+), documents one at a time ([0-9.]+), difference", res.stdout)
    assert found and abs(float(found[1]) - float(found[2])) < 1e-5, res.stdout
    losses = [float(x) for x in re.findall(r"^step \d: loss ([0-9.]+)$", res.stdout, re.M)]
    assert len(losses) == 5 and losses[-1] < losses[0] - 0.5, res.stdout


def test_hf_model_bench_decode_only_decodes_what_a_full_prefill_does(tmp_path):
    """bench/hf_model.py --decode-only prefills the prompt once and starts every run's generate() from a copy of
    that cache in the run's cache type: on a left-padded batch each run's greedy tokens are those of the runs that
    prefill themselves (same positions, same keys and values), for the float and int8 caches and torch's."""
    import json
    figures = {}
    for mode in ("full", "decode-only"):
        out = tmp_path / f"{mode}.json"
        args = ["--layers", "2", "--width", "96", "--heads", "6", "--kv-heads", "2", "--vocab", "200", "--prefill",
                "40", "--new", "6", "--rounds", "1", "--batch", "2", "--no-warmup", "--kv-cache", "float,int8",
                "--json", str(out)] + (["--decode-only"] if mode == "decode-only" else [])
        res = run_script("bench/hf_model.py", *args)
        assert res.returncode == 0, res.stderr[-3000:]
        figures[mode] = json.loads(out.read_text())
    full, shared = figures["full"], figures["decode-only"]
    assert list(shared["tokens"]) == ["sdpa, GrowingCache", "sdpa, int8 QuantizedCache", "torch sdpa, DynamicCache"]
    for label, toks in shared["tokens"].items():
        assert len(toks) == 2 * 6 and toks == full["tokens"][label], label
    assert all(v == [] for v in (shared["runs"][label]["prefill_s"] for label in shared["runs"]))
    assert all(len(full["runs"][label]["prefill_s"]) == 1 for label in full["runs"])


def test_sliding_window_benches_run(tmp_path):
    """bench/hf_masks.py (a sliding-window model's prefill, build_mask against sdpa_mask; a decoder, then an
    encoder beside PyTorch's SDPA, then Llama 4's chunks, then a packed batch's training step) runs and finds the
    same bits (chunks and packed sequences: within float32's rounding); bench/hf_model.py --window runs its sliding
    model on both backends to the same greedy tokens."""
    import json

    def run(script, *args):
        return run_script(f"bench/{script}", *args)

    shape = ["--layers", "2", "--width", "96", "--heads", "6", "--kv-heads", "2", "--vocab", "200", "--window", "8"]
    res = run("hf_masks.py", *shape, "--prefill", "40", "--rounds", "1", "--batch", "2")
    assert res.returncode == 0, res.stderr[-3000:]
    assert "a padded batch of 2, sliding window 8" in res.stdout, res.stdout
    assert "same logits, bit for bit: True" in res.stdout, res.stdout
    res = run("hf_masks.py", *shape, "--prefill", "40", "--rounds", "1", "--encoder", "--torch", "--batch", "2")
    assert res.returncode == 0, res.stderr[-3000:]
    assert "a padded batch of 2, a ModernBERT encoder, 8 tokens on either side" in res.stdout, res.stdout
    assert "same hidden states, bit for bit: True" in res.stdout, res.stdout
    gap = float(res.stdout.split("largest hidden states difference over the largest hidden states: ")[1].split()[0])
    assert gap < 1e-5, res.stdout  # PyTorch's kernel on the same booleans: float32 rounding apart
    res = run("hf_masks.py", *shape, "--prefill", "40", "--rounds", "1", "--chunked", "--torch")
    assert res.returncode == 0, res.stderr[-3000:]
    assert "chunks of 8 (Llama 4) on every layer" in res.stdout, res.stdout
    for other in ("sdpa_mask (booleans)", "torch sdpa (booleans)"):  # a call a chunk: rounding apart at most
        line = next(x for x in res.stdout.splitlines() if x.startswith(other + " / "))
        assert float(line.split("largest logits difference over the largest logits: ")[1].split()[0]) < 1e-5, line
    res = run("hf_masks.py", *shape, "--prefill", "40", "--rounds", "1", "--packed", "4", "--train", "--torch")
    assert res.returncode == 0, res.stderr[-3000:]
    assert "packed from 4 sequences, a training step (forward and backward), sliding window 8" in res.stdout, res.stdout
    for other in ("sdpa_mask (booleans)", "torch sdpa (booleans)"):  # one varlen call: rounding apart at most
        line = next(x for x in res.stdout.splitlines() if x.startswith(other + " / "))
        assert float(line.split("largest loss difference over the largest loss: ")[1].split()[0]) < 1e-5, line
    res = run("hf_masks.py", "--packed", "2", "--encoder")
    assert res.returncode == 2 and "--packed: the sliding-window decoder alone" in res.stderr, res.stderr
    res = run("hf_masks.py", "--window", "0")
    assert res.returncode == 2 and "--window: must be >= 1, got 0" in res.stderr, res.stderr
    res = run("hf_masks.py", "--chunked", "--batch", "2")
    assert res.returncode == 2 and "--chunked with --batch above 1" in res.stderr, res.stderr
    out = tmp_path / "figures.json"
    res = run("hf_model.py", *shape, "--prefill", "20", "--new", "16", "--rounds", "1", "--no-warmup", "--json",
              str(out))
    assert res.returncode == 0, res.stderr[-3000:]
    assert "sliding window 8 on every layer" in res.stdout
    tokens = json.loads(out.read_text())["tokens"]
    ours = tokens["sdpa, GrowingCache"]
    assert len(ours) == 16 and ours == tokens["torch sdpa, DynamicCache"]


def test_decode_layers_bench_runs():
    """bench/decode_layers.py (a decoding call split into its layers) runs on a tiny model at the thread count asked,
    and times each of its four variants."""
    res = run_script("bench/decode_layers.py", "--layers", "2", "--width", "96", "--heads", "6", "--kv-heads", "2",
                      "--vocab", "200", "--prefill", "20", "--new", "4", "--rounds", "1", "--threads", "1")
    assert res.returncode == 0, res.stderr[-3000:]
    assert ", 1 threads, isa " in res.stdout, res.stdout
    rows = [line for line in res.stdout.splitlines() if line.startswith("| ") and not line.startswith("| variant")]
    assert [r.split(" | ")[0][2:] for r in rows] == ["torch sdpa", "sdpa full", "sdpa inference", "kernel alone"]
    assert all(float(r.split(" | ")[1]) > 0 for r in rows), rows


def test_hf_requests_bench_runs():
    """bench/hf_requests.py (many requests in one batch against one at a time) runs on three short requests, and
    every way gives each request the greedy tokens it gets alone."""
    import re
    res = run_script("bench/hf_requests.py", "--requests", "3", "--min-prompt", "4", "--max-prompt", "9", "--new", "3",
                      "--rounds", "1", "--threads", "1")
    assert res.returncode == 0, res.stderr[-3000:]
    agree = re.findall(r"^\| (sdpa, one batch|sdpa, one at a time|torch sdpa, one batch) \|.* (\d+) of (\d+) \|$",
                       res.stdout, re.M)
    ways = ["sdpa, one batch", "sdpa, one at a time", "torch sdpa, one batch"]
    assert [way for way, _, _ in agree] == ways, res.stdout
    assert all(got == total == "9" for _, got, total in agree), agree


def test_lazy_attributes_are_their_own_modules():
    # `sdpa.transformers` and `sdpa.torch` load on first attribute access (sdpa/__init__.py);
    # each name must give its own module, not another's.
    import sdpa

    assert sdpa.transformers is sht
    assert sdpa.transformers.NAME == "exact_cpu"
    assert sdpa.torch.__name__ == "sdpa.torch"
    assert sdpa.distributed.__name__ == "sdpa.distributed"


def test_attention_dropout_in_training_mode():
    """transformers passes the module's attention dropout only in training mode: the backend applies it (sdpa's
    dropout_p, seeded from torch's generator), so torch.manual_seed repeats a training step, eval mode is exact,
    and the backward runs through the same mask."""
    cfg = LlamaConfig(**SMALL, num_key_value_heads=2, max_position_embeddings=128, attention_dropout=0.3)
    ours, _, _ = _models(cfg)
    ids = _ids(3, 2, 12)
    ours.train()
    torch.manual_seed(1)
    a = ours(ids).logits
    a.square().mean().backward()
    assert all(torch.isfinite(p.grad).all() for p in ours.parameters() if p.grad is not None)
    torch.manual_seed(1)
    with torch.no_grad():
        b = ours(ids).logits
    assert torch.equal(a.detach(), b)
    ours.eval()
    with torch.no_grad():
        c = ours(ids).logits
    assert (c - b).abs().max() > 1e-3, "training mode applied no dropout"


def _check_bf16_model(ours, reference, gold, ids, label):
    """FlashAttention's rule lifted to a bf16 model: sdpa's model's error against the float64 model on the same
    weights at most twice the reference bf16 model's plus rounding one bf16 result once (u·max|gold|, u = 2^-8).
    Logits of a forward, and every parameter's gradient after one step of the LM loss. A MoE router's gradient is
    a difference of expert outputs summed over tokens: it cancels terms far larger than itself, which that floor
    does not bound, so it is checked finite only."""
    u = 2.0 ** -8

    def rule(name, x, ref, g):
        assert x.dtype == torch.bfloat16, name
        x, ref, g = (t.detach().double() for t in (x, ref, g))
        err, err_ref = (x - g).abs().max().item(), (ref - g).abs().max().item()
        bound = 2 * err_ref + u * g.abs().max().item()
        assert err <= bound, f"{name}: error {err:.3g} > bound {bound:.3g} ({label} bf16 error {err_ref:.3g})"

    with torch.no_grad():
        rule("logits", ours.eval()(ids).logits, reference.eval()(ids).logits, gold.eval()(ids).logits)

    def grads(model):
        model.train()
        model.zero_grad()
        model(ids, labels=ids).loss.backward()
        return {n: p.grad for n, p in model.named_parameters() if p.grad is not None}

    g_ours, g_ref, g_gold = grads(ours), grads(reference), grads(gold)
    assert g_ours.keys() == g_gold.keys() and len(g_ours) > 4
    for n in g_gold:
        if ".router." in n:
            assert torch.isfinite(g_ours[n]).all(), n
            continue
        rule(n, g_ours[n], g_ref[n], g_gold[n])


@pytest.mark.parametrize("name", DECODERS)
def test_bfloat16_models_against_eager(name):
    """Each decoder in torch.bfloat16 (gpt-oss with its sinks, Gemma2 with soft-cap and window, Qwen2 with its
    window): sdpa as its attention against eager attention in the same bf16 model, both judged against the model
    in float64 on those weights. Outside attention both run the same torch ops on the same bf16 values, so the
    rule is _check_bf16_model's (the sinks' gradients included), and greedy generation with the KV cache runs in
    bf16."""
    ours, eager, gold = _models(name)
    ours, eager = ours.to(torch.bfloat16), eager.to(torch.bfloat16)
    gold.load_state_dict({n: p.double() for n, p in ours.state_dict().items()})  # the bf16 weights, exactly
    ids = _ids(8, 2, 20)
    _check_bf16_model(ours, eager, gold, ids, "eager")
    with torch.no_grad():
        tokens = ours.eval().generate(ids[:1, :9], max_new_tokens=8, do_sample=False, pad_token_id=0)
    assert tokens.shape == (1, 17)


def test_bfloat16_model_against_torch_sdpa():
    """A whole model in torch.bfloat16 (llama-gqa): sdpa as its attention against the same bf16 weights with
    torch's own SDPA ("sdpa"), both judged against the model in float64 on those weights (eager).

    The tolerance is FlashAttention's rule lifted to the model: outside attention both bf16 models run the same
    torch ops on the same bf16 values and round every activation alike, so the only difference is the attention
    kernel; sdpa's error against float64 must then be at most twice torch-SDPA-bf16's, plus rounding one bf16
    result once (u·max|gold|, u = 2^-8), as for a single attention call (test_dtypes.py). Logits of a forward,
    and every parameter's gradient after one backward step of the LM loss."""
    cfg = CONFIGS["llama-gqa"]()
    torch.manual_seed(0)
    ours = AutoModelForCausalLM.from_config(copy.deepcopy(cfg), attn_implementation=sht.NAME).to(torch.bfloat16)
    theirs = AutoModelForCausalLM.from_config(copy.deepcopy(cfg), attn_implementation="sdpa").to(torch.bfloat16)
    theirs.load_state_dict(ours.state_dict())
    gold = AutoModelForCausalLM.from_config(copy.deepcopy(cfg), attn_implementation="eager").double()
    gold.load_state_dict(ours.state_dict())  # the bf16 weights, widened exactly
    _check_bf16_model(ours, theirs, gold, _ids(7, 2, 24), "torch SDPA")


@pytest.mark.parametrize("name", ["llama-gqa", "qwen2-window", "gpt-oss-sinks", "llama4-chunked"])
def test_growing_cache_generates_dynamic_caches_tokens(name):
    """sdpa.transformers.GrowingCache: 32 greedy tokens of a left-padded batch the same as with transformers'
    DynamicCache, the buffers grown in place several times on the way (min_room 4), sliding layers left as
    transformers' own; and its logits the same bits as DynamicCache's (the same keys, read in place)."""
    ours, _, _ = _models(name)
    ids = _ids(11, 2, 13)
    mask = torch.ones_like(ids)
    ids[1, :4], mask[1, :4] = 0, 0
    kw = dict(attention_mask=mask, max_new_tokens=32, do_sample=False, pad_token_id=0)
    with torch.no_grad():
        want = ours.generate(ids, **kw)
        cache = sht.GrowingCache(config=ours.config, min_room=4, growth=0.1)
        got = ours.generate(ids, **kw, **{sht._CACHE_KWARG: cache})
    assert torch.equal(got, want)
    grown = [layer for layer in cache.layers if isinstance(layer, sht.GrowingLayer)]
    assert grown, "no full-attention layer took the growing cache"
    assert len(grown) == len(cache.layers) - sum(type(layer).__name__ == "DynamicSlidingWindowLayer"
                                                  for layer in cache.layers)
    for layer in grown:
        assert layer.keys.shape[2] == 13 + 31 and layer.keys.data_ptr() == layer._k_buf.data_ptr()
        assert layer._k_buf.shape[2] < 2 * (13 + 31)  # growth 0.1: a tenth more room, plus min_room
    # a chunked prefill through both caches: the same bits
    with torch.no_grad():
        a, b = DynamicCache(config=ours.config), sht.GrowingCache(config=ours.config, min_room=1)
        for lo, hi in ((0, 7), (7, 9), (9, 13)):
            la = ours(ids[:1, lo:hi], use_cache=True, **{sht._CACHE_KWARG: a}).logits
            lb = ours(ids[:1, lo:hi], use_cache=True, **{sht._CACHE_KWARG: b}).logits
            assert torch.equal(la, lb)


class _Substituted(DynamicLayer):
    """A float cache layer that stores, at each position, what a QuantizedLayer holds there (dequantized), in
    place of the keys and values its model computed: a float model over it attends to exactly the values the
    quantized cache's model read."""

    def __init__(self, source):
        super().__init__()
        self.source = source

    def update(self, key_states, value_states, *args, **kwargs):
        n0, n = self.get_seq_length(), key_states.shape[2]
        k, v = self.source.dequantized(key_states.dtype)  # code x scale in fp32: exact in fp64 too
        return super().update(k[:, :, n0:n0 + n], v[:, :, n0:n0 + n])


def _beam_search_then_crop(make_cache, layer_class):
    """Beam search with make_cache(config)'s cache gives DynamicCache's sequences; then one layer_class layer
    takes 5 tokens, drops 2 (crop) and takes 1 more: (layer, the 5 tokens, the keys update returned)."""
    ours, _, _ = _models("llama-gqa")
    ids = _ids(12, 1, 9)
    kw = dict(max_new_tokens=12, num_beams=3, do_sample=False, pad_token_id=0, early_stopping=False)
    with torch.no_grad():
        want = ours.generate(ids, **kw)
        got = ours.generate(ids, **kw, **{sht._CACHE_KWARG: make_cache(ours.config)})
    assert torch.equal(got, want)
    layer = layer_class(min_room=2)
    x = torch.randn(1, 2, 5, 4)
    layer.update(x, x)
    layer.crop(-2)
    k, _ = layer.update(x[:, :, :1], x[:, :, :1])
    return layer, x, k


def _substituted_cache(cache):
    out = DynamicCache()
    out.layers = [_Substituted(layer) for layer in cache.layers]
    return out


@pytest.mark.parametrize("fmt", ["int8", "fp8_e4m3"])
def test_quantized_cache_attends_to_its_dequantized_values(fmt):
    """QuantizedCache under 'exact_cpu': a decoding step and a causal chunk of 3 read the codes in place, and the
    logits are those of the float model over the same dequantized keys and values (eager fp32 and fp64 with
    those values substituted into their caches), within the fp32 rule: the kernel adds nothing to the
    quantization. Every full-attention layer holds codes, not floats, in fewer bytes than fp32."""
    ours, eager, gold = _models("llama-gqa")
    ids = _ids(13, 2, 17)
    calls, got, smax = [], [], []
    route = sht._quantized_inference

    def counted(layer, query, *a):
        out = route(layer, query, *a)
        calls.append(query.shape[2] if out is not None else None)  # None: the route declined
        return out

    steps = ((0, 12), (12, 13), (13, 16))  # a prefill, one token, then a chunk of three
    with torch.no_grad():
        cache = sht.QuantizedCache(config=ours.config, format=fmt, min_room=2)
        sht._quantized_inference = counted
        try:
            for lo, hi in steps:
                with SmaxSpy() as spy:
                    got.append(ours(ids[:, lo:hi], use_cache=True, **{sht._CACHE_KWARG: cache}).logits)
                smax.append(spy.smax)
        finally:
            sht._quantized_inference = route
        e_cache, g_cache = _substituted_cache(cache), _substituted_cache(cache)
        for (lo, hi), logits, s in zip(steps, got, smax):
            want = eager(ids[:, lo:hi], use_cache=True, **{sht._CACHE_KWARG: e_cache}).logits
            ref = gold(ids[:, lo:hi], use_cache=True, **{sht._CACHE_KWARG: g_cache}).logits
            if lo:  # the prefill's own queries read float keys in eager (nothing substituted yet for them)
                _check(f"{fmt} logits, tokens {lo}..{hi}", logits, want, ref, max(s, 1.0))
    assert calls == [12] * len(cache.layers) + [1] * len(cache.layers) + [3] * len(cache.layers)
    for layer in cache.layers:
        assert layer.get_seq_length() == 16 and layer.keys.device.type == "meta"
        assert [b.dtype for b in layer._buffers] == [torch.uint8, torch.float32] * 2
    floats = 2 * 16 * sum(4 * b.shape[0] * b.shape[1] * b.shape[3] for layer in cache.layers
                          for b in layer._buffers[::2])
    assert cache.nbytes < floats  # codes + scales at capacity, against fp32 keys and values at length 16


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("fmt", ["int8", "fp8_e4m3"])
def test_quantized_inference_route_gives_the_full_routes_bits(fmt, dtype):
    """A QuantizedLayer's new tokens wait for the attention call, whose kernel quantizes them into the cache:
    on the cached route (_quantized_inference) and on the full one (attention_with_kvcache) the same outputs and
    the same codes and scales, and those codes are quantize_kv's (a layer that quantizes at every update);
    a prefill chunk, two decoding steps and a chunk with sinks, a window and soft-cap."""
    g = torch.Generator().manual_seed(5)
    layers = [sht.QuantizedLayer(fmt, min_room=4) for _ in range(3)]  # cached route, full route, quantize_kv
    route, taken = sht._quantized_inference, []
    steps = ((9, {}), (1, {}), (1, {"scaling": 0.3}),
             (3, {"s_aux": torch.tensor([0.5, -1.0, 2.0, 0.0, 1.0, -0.5]), "sliding_window": 6, "softcap": 2.5}))
    with torch.no_grad():
        for n, kw in steps:
            q = torch.randn(2, n, 6, 16, generator=g).to(dtype).transpose(1, 2)  # a projection's view
            k, v = (torch.randn(2, 2, n, 16, generator=g).to(dtype) for _ in range(2))
            outs = []
            for i, layer in enumerate(layers):
                keys, values = layer.update(k, v)
                if i == 2:
                    layer.flush()  # quantized here, by quantize_kv
                sht._quantized_inference = route if i == 0 else (lambda *a: None)
                try:
                    out, _ = sht.attention_forward(_Layer(), q, keys, values, None, **kw)
                finally:
                    sht._quantized_inference = route
                outs.append(out)
                assert layer.get_seq_length() == layers[0].get_seq_length() and layer._pending is None
            taken.append(route(layers[0], q, None, None, False, None, None) is not None)  # nothing waits: reads
            assert outs[0].is_contiguous() and outs[0].shape == (2, n, 6, 16) and outs[0].dtype == dtype
            assert torch.equal(outs[0], outs[1]) and torch.equal(outs[0], outs[2])
    assert all(taken)
    for a, b in ((layers[0], layers[1]), (layers[0], layers[2])):
        for x, y in zip(a._buffers, b._buffers):
            assert torch.equal(x[:, :, :a.get_seq_length()], y[:, :, :b.get_seq_length()])
    # a NaN among the new tokens: refused by the call that would quantize it, naming the argument; it stays
    # waiting (never written as a finite code), and a read of the layer refuses it too
    layer = layers[0]
    bad = torch.zeros(2, 2, 1, 16, dtype=dtype)
    bad[1, 1, 0, 3] = float("nan")  # [B, H, N, D]: the message names it in these terms
    keys, values = layer.update(bad, torch.zeros_like(bad))
    with torch.no_grad(), pytest.raises(sht._api._ext.Error, match=r"^key: element \[1, 1, 0, 3\] is nan"):
        sht.attention_forward(_Layer(), torch.zeros(2, 6, 1, 16, dtype=dtype), keys, values, None)
    for read in (layer.dequantized, layer.flush):
        with pytest.raises(sht._api._ext.Error, match=r"^key: element \[1, 1, 0, 3\] is nan"):
            read()
    assert layer._length == 14 and layer.get_seq_length() == 15


@pytest.mark.parametrize("name", ["llama-gqa", "qwen2-window", "gpt-oss-sinks", "llama4-chunked"])
@pytest.mark.parametrize("fmt", ["int8", "fp8_e4m3"])
def test_quantized_cache_greedy_tokens_against_the_float_cache(name, fmt):
    """32 greedy tokens of a left-padded batch (the padded row's mask reads a dequantized copy) with
    QuantizedCache against transformers' DynamicCache. 8-bit keys move the logits a little, so the tokens may
    part where the float cache's top two were nearly tied: up to each row's first difference they agree, and
    there the float cache's margin between its token and ours is at most the two logits' combined move
    measured at that step (a flip needs a move larger than the margin)."""
    ours, _, _ = _models(name)
    ids = _ids(11, 2, 13)
    mask = torch.ones_like(ids)
    ids[1, :4], mask[1, :4] = 0, 0
    kw = dict(attention_mask=mask, max_new_tokens=32, do_sample=False, pad_token_id=0, output_scores=True,
              return_dict_in_generate=True)
    with torch.no_grad():
        want = ours.generate(ids, **kw)
        got = ours.generate(ids, **kw, **{sht._CACHE_KWARG: sht.QuantizedCache(config=ours.config, format=fmt)})
    new_want, new_got = want.sequences[:, 13:], got.sequences[:, 13:]
    agreed = []
    for row in range(2):
        differ = (new_want[row] != new_got[row]).nonzero()
        t = int(differ[0]) if len(differ) else 32
        agreed.append(t)
        if t < 32:
            s_float, s_quant = want.scores[t][row].double(), got.scores[t][row].double()
            a, b = int(new_want[row, t]), int(new_got[row, t])
            margin = float(s_float[a] - s_float[b])
            moved = float((s_quant[a] - s_float[a]).abs() + (s_quant[b] - s_float[b]).abs())
            assert 0 <= margin <= moved, f"row {row} token {t}: margin {margin:.3g}, logits moved {moved:.3g}"
    print(f"{name} {fmt}: greedy tokens equal to the float cache's for {agreed} of 32 (per row)")


def test_quantized_cache_errors_and_cache_operations():
    """Bad formats and arguments are refused; the stand-ins fail on another backend; crop and beam search's
    reorder act on the codes (beam search's sequences are the float cache's for int8 on this model)."""
    with pytest.raises(ValueError, match="format"):
        sht.QuantizedCache(format="int4")
    with pytest.raises(ValueError, match="growth"):
        sht.QuantizedLayer(growth=0)
    _, eager, _ = _models("llama-gqa")
    with torch.no_grad(), pytest.raises(Exception):  # eager attention cannot compute with meta tensors
        eager(_ids(12, 1, 9), use_cache=True, **{sht._CACHE_KWARG: sht.QuantizedCache(config=eager.config)})
    layer, x, k = _beam_search_then_crop(lambda cfg: sht.QuantizedCache(config=cfg, min_room=2), sht.QuantizedLayer)
    assert k.shape == (1, 2, 4, 4) and k.device.type == "meta"
    deq, _ = layer.dequantized()
    step = x.abs().amax(-1, keepdim=True) / 127  # int8: within half a step of each element
    assert torch.all((deq - torch.cat([x[:, :, :3], x[:, :, :1]], dim=2)).abs() <= 0.5 * torch.cat(
        [step[:, :, :3], step[:, :, :1]], dim=2) * (1 + 1e-6))
    with pytest.raises(ValueError, match="do not fit"):
        layer.update(torch.randn(1, 3, 1, 4), torch.randn(1, 3, 1, 4))
    with torch.enable_grad(), pytest.raises(ValueError, match="inference only"):
        q = torch.randn(1, 4, 1, 4, requires_grad=True)
        sht.attention_forward(torch.nn.Module(), q, layer.keys, layer.values, None)


def test_growing_cache_adopts_reordered_and_cropped_contents():
    """Beam search reorders the cache (reorder_cache: new tensors) and crop() narrows it: the layer adopts what
    .keys holds at the next update, so beam search gives DynamicCache's sequences; bad arguments are refused."""
    _, x, k = _beam_search_then_crop(lambda cfg: sht.GrowingCache(config=cfg, min_room=2), sht.GrowingLayer)
    assert torch.equal(k, torch.cat([x[:, :, :3], x[:, :, :1]], dim=2))
    with pytest.raises(ValueError, match="growth"):
        sht.GrowingCache(growth=0)

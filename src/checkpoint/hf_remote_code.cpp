// The two Python files `nanochat export --format hf` writes beside a model of the current
// architecture (value embeddings, smear, per-layer scalars, sliding windows), which
// transformers' own `nanochat` class cannot express: a PretrainedConfig holding our
// model_config and a PreTrainedModel with our forward, loaded through config.json's auto_map
// with trust_remote_code=True. The tensors keep our names (and the padded vocabulary rows), so
// the state dict maps one to one. Written for this project from gpt.h's description of the
// model; generate() uses transformers' DynamicCache (one forward a token), or none with use_cache=False.
#include "nanochat/checkpoint/checkpoint_gpt.h"

namespace nanochat {

extern const char* const kHfRemoteConfigPy;
extern const char* const kHfRemoteModelingPy;

const char* const kHfRemoteConfigPy =
    R"PY("""nanochat (C++) model configuration: the meta JSON's model_config, for transformers.

Besides our own names it sets the standard ones transformers' generation and cache code read
(num_hidden_layers, hidden_size, num_attention_heads, num_key_value_heads, head_dim,
max_position_embeddings, layer_types, sliding_window), derived from ours.
"""
from transformers import PretrainedConfig

_STANDARD = ("num_hidden_layers", "hidden_size", "num_attention_heads", "num_key_value_heads", "head_dim",
             "max_position_embeddings", "layer_types", "sliding_window")


def window_sizes(sequence_len, n_layer, window_pattern):
    """each layer's left window (gpt.h): L = the context, S = a quarter of it rounded up to 128; the last is L"""
    short_w = -(-sequence_len // 4 // 128) * 128
    pattern = window_pattern.upper()
    w = [sequence_len if pattern[i % len(pattern)] == "L" else short_w for i in range(n_layer)]
    w[-1] = sequence_len
    return w


class NanochatCppConfig(PretrainedConfig):
    model_type = "nanochat_cpp"

    def __init__(self, sequence_len=2048, vocab_size=32768, n_layer=12, n_head=6, n_kv_head=6, n_embd=768,
                 window_pattern="SSSL", value_embeds=True, smear=True, layer_scalars=True, rope_theta=100000.0,
                 softcap=15.0, qk_scale=1.2, norm_eps=0.0, **kwargs):
        for key in _STANDARD:  # derived from ours below, never read back as given
            kwargs.pop(key, None)
        kwargs.setdefault("tie_word_embeddings", False)
        super().__init__(**kwargs)
        self.sequence_len, self.vocab_size, self.n_layer = sequence_len, vocab_size, n_layer
        self.n_head, self.n_kv_head, self.n_embd, self.window_pattern = n_head, n_kv_head, n_embd, window_pattern
        self.value_embeds, self.smear, self.layer_scalars = value_embeds, smear, layer_scalars
        self.rope_theta, self.softcap, self.qk_scale, self.norm_eps = rope_theta, softcap, qk_scale, norm_eps
        self.num_hidden_layers, self.hidden_size, self.max_position_embeddings = n_layer, n_embd, sequence_len
        self.num_attention_heads, self.num_key_value_heads, self.head_dim = n_head, n_kv_head, n_embd // n_head
        windows = window_sizes(sequence_len, n_layer, window_pattern)
        # a layer of window w sees its own position and w before it: transformers' sliding layers
        # count the query's own token, so theirs is w + 1
        self.layer_types = ["sliding_attention" if w < sequence_len else "full_attention" for w in windows]
        short = [w for w in windows if w < sequence_len]
        self.sliding_window = min(short) + 1 if short else None
)PY";

const char* const kHfRemoteModelingPy =
    R"PY("""nanochat (C++) model for transformers: the GPT of a nanochat checkpoint, tensors under nanochat's names.

Embedding -> RMSNorm -> (smear: each position adds a gated share of the previous one) -> blocks, each
x = resid_lambda * x + x0_lambda * x0; x += attn(norm(x)); x += mlp(norm(x)) with value embeddings mixed
into v on alternating layers, rotary then QK norm (times qk_scale), causal attention within a left window
-> norm(x - backout_lambda * x_at_the_middle_layer) -> lm_head -> softcap * tanh(logits / softcap).

KV cache: transformers' DynamicCache (made from the config's layer_types and sliding_window), so
generate() runs the prompt once and then one token a forward. The smear of a new token needs the
token before it: generate() passes it as prev_ids. Batches are unpadded (attention_mask is not read).
"""
import dataclasses

import torch
import torch.nn as nn
import torch.nn.functional as F
from transformers import GenerationMixin, PreTrainedModel
from transformers.cache_utils import DynamicCache
from transformers.modeling_outputs import CausalLMOutputWithPast

from .configuration_nanochat_cpp import NanochatCppConfig, window_sizes

# transformers 5.25 names the cache `cache`; earlier releases `past_key_values`
_CACHE_FIELD = "cache" if "cache" in {f.name for f in dataclasses.fields(CausalLMOutputWithPast)} else "past_key_values"


def _has_ve(layer, n_layer):
    return layer % 2 == (n_layer - 1) % 2


class _Linear(nn.Module):
    def __init__(self, n_in, n_out):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(n_out, n_in))

    def forward(self, x):
        return F.linear(x, self.weight.to(x.dtype))


class _Attention(nn.Module):
    def __init__(self, cfg, layer):
        super().__init__()
        self.n_head, self.n_kv_head = cfg.n_head, cfg.n_kv_head
        self.head_dim = cfg.n_embd // cfg.n_head
        self.c_q = _Linear(cfg.n_embd, self.n_head * self.head_dim)
        self.c_k = _Linear(cfg.n_embd, self.n_kv_head * self.head_dim)
        self.c_v = _Linear(cfg.n_embd, self.n_kv_head * self.head_dim)
        self.c_proj = _Linear(cfg.n_embd, cfg.n_embd)
        if cfg.value_embeds and _has_ve(layer, cfg.n_layer):
            self.ve_gate = _Linear(12, self.n_kv_head)


class _MLP(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.c_fc = _Linear(cfg.n_embd, 4 * cfg.n_embd)
        self.c_proj = _Linear(4 * cfg.n_embd, cfg.n_embd)


class _Block(nn.Module):
    def __init__(self, cfg, layer):
        super().__init__()
        self.attn = _Attention(cfg, layer)
        self.mlp = _MLP(cfg)


class NanochatCppForCausalLM(PreTrainedModel, GenerationMixin):
    config_class = NanochatCppConfig
    base_model_prefix = "nanochat_cpp"

    def __init__(self, config):
        super().__init__(config)
        c = config
        vocab_padded = -(-c.vocab_size // 64) * 64
        kv_dim = c.n_kv_head * (c.n_embd // c.n_head)
        self.transformer = nn.ModuleDict(dict(wte=nn.Embedding(vocab_padded, c.n_embd),
                                              h=nn.ModuleList([_Block(c, i) for i in range(c.n_layer)])))
        self.lm_head = _Linear(c.n_embd, vocab_padded)
        if c.layer_scalars:
            self.resid_lambdas = nn.Parameter(torch.ones(c.n_layer))
            self.x0_lambdas = nn.Parameter(torch.zeros(c.n_layer))
        if c.smear:
            self.smear_gate = _Linear(24, 1)
            self.smear_lambda = nn.Parameter(torch.zeros(1))
        if c.layer_scalars:
            self.backout_lambda = nn.Parameter(torch.zeros(1))
        if c.value_embeds:
            self.value_embeds = nn.ModuleDict({str(i): nn.Embedding(vocab_padded, kv_dim)
                                               for i in range(c.n_layer) if _has_ve(i, c.n_layer)})
        self.post_init()

    def _init_weights(self, module):
        pass  # weights come from the checkpoint

    def _norm(self, x):
        eps = self.config.norm_eps or None
        return F.rms_norm(x, (x.size(-1),), eps=eps)

    def _rotary(self, x, start, T):  # (cos, sin) of positions start.., shape (1, T, 1, head_dim/2): rotating by -theta
        hd = self.config.n_embd // self.config.n_head
        channel = torch.arange(0, hd, 2, dtype=torch.float32, device=x.device)
        inv_freq = 1.0 / (self.config.rope_theta ** (channel / hd))
        t = torch.arange(start, start + T, dtype=torch.float32, device=x.device)
        freqs = torch.outer(t, inv_freq)
        return freqs.cos()[None, :, None, :].to(x.dtype), freqs.sin()[None, :, None, :].to(x.dtype)

    def _attend(self, attn, x, ve, cos, sin, window, cache, layer, start):
        B, T, C = x.shape
        hd = attn.head_dim
        q = attn.c_q(x).view(B, T, attn.n_head, hd)
        k = attn.c_k(x).view(B, T, attn.n_kv_head, hd)
        v = attn.c_v(x).view(B, T, attn.n_kv_head, hd)
        if ve is not None:
            gate = 3 * torch.sigmoid(attn.ve_gate(x[..., :12]))
            v = v + gate.unsqueeze(-1) * ve.view(B, T, attn.n_kv_head, hd)

        def rotate_and_norm(t):
            a, b = t[..., :hd // 2], t[..., hd // 2:]
            return self._norm(torch.cat([a * cos + b * sin, -a * sin + b * cos], dim=-1)) * self.config.qk_scale

        q, k = rotate_and_norm(q).transpose(1, 2), rotate_and_norm(k).transpose(1, 2)
        v = v.transpose(1, 2)
        if cache is not None:  # the keys it returns end at this chunk's last position
            k, v = cache.update(k, v, layer)
        K = k.size(2)
        i = torch.arange(start, start + T, device=x.device)[:, None]
        j = torch.arange(start + T - K, start + T, device=x.device)[None, :]
        mask = (j <= i) & ((i - j) <= window)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=attn.n_head != attn.n_kv_head)
        return attn.c_proj(y.transpose(1, 2).reshape(B, T, C))

    def _smear(self, x, x_prev):  # x_prev: the normed embedding of the position before x's first, or None
        c = self.config
        if x_prev is not None:
            x = torch.cat([x_prev, x], dim=1)
        if x.size(1) > 1:
            gate = self.smear_lambda.to(x.dtype) * torch.sigmoid(self.smear_gate(x[:, 1:, :24]))
            x = torch.cat([x[:, :1], x[:, 1:] + gate * x[:, :-1]], dim=1)
        return x[:, 1:] if x_prev is not None else x

    def forward(self, input_ids=None, attention_mask=None, cache=None, past_key_values=None, use_cache=None,
                labels=None, prev_ids=None, **kwargs):
        c, idx = self.config, input_ids
        cache = cache if cache is not None else past_key_values
        use_cache = use_cache if use_cache is not None else getattr(c, "use_cache", True)
        if use_cache and cache is None:
            cache = DynamicCache(config=c)
        if not use_cache:
            cache = None
        start = cache.get_seq_length(c.n_layer - 1) if cache is not None else 0  # the last layer keeps every position
        T = idx.size(1)
        dtype = self.lm_head.weight.dtype
        cos, sin = self._rotary(self.lm_head.weight.to(dtype), start, T)
        x = self._norm(self.transformer.wte(idx).to(dtype))
        if c.smear:
            if start > 0 and prev_ids is None:
                raise ValueError("with a cache, the smear needs the token before input_ids: pass prev_ids")
            x_prev = self._norm(self.transformer.wte(prev_ids).to(dtype)) if start > 0 else None
            x = self._smear(x, x_prev)
        x0, x_backout, windows = x, None, window_sizes(c.sequence_len, c.n_layer, c.window_pattern)
        for i, block in enumerate(self.transformer.h):
            if c.layer_scalars:
                x = self.resid_lambdas[i] * x + self.x0_lambdas[i] * x0
            ve = None
            if c.value_embeds and str(i) in self.value_embeds:
                ve = self.value_embeds[str(i)](idx).to(x.dtype)
            x = x + self._attend(block.attn, self._norm(x), ve, cos, sin, windows[i], cache, i, start)
            h = self._norm(x)
            x = x + block.mlp.c_proj(F.relu(block.mlp.c_fc(h)).square())
            if i == c.n_layer // 2:
                x_backout = x
        if c.layer_scalars:
            x = x - self.backout_lambda.to(x.dtype) * x_backout
        logits = self.lm_head(self._norm(x))[..., :c.vocab_size].float()
        logits = c.softcap * torch.tanh(logits / c.softcap)
        loss = None
        if labels is not None:
            loss = F.cross_entropy(logits[:, :-1].reshape(-1, logits.size(-1)), labels[:, 1:].reshape(-1),
                                   ignore_index=-100)
        return CausalLMOutputWithPast(loss=loss, logits=logits, **{_CACHE_FIELD: cache})

    def prepare_inputs_for_generation(self, input_ids, *args, **kwargs):
        inputs = super().prepare_inputs_for_generation(input_ids, *args, **kwargs)
        n = inputs["input_ids"].size(1)
        if self.config.smear and n < input_ids.size(1):  # the token before the new ones, for the smear
            inputs["prev_ids"] = input_ids[:, -n - 1:-n]
        return inputs
)PY";

}  // namespace nanochat

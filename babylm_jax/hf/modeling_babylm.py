"""PyTorch twin of the babylm_jax Transformer, shipped beside an export's config.json.

Loaded by transformers with `trust_remote_code=True` for the variants no standard
architecture covers: masked (BERT-style head) and hybrid (GPT-BERT) encoders, and causal
models with a GELU MLP or LayerNorm. It mirrors `babylm_jax/model/{layers,transformer}.py`:
pre-norm blocks, RoPE ("rotate_half" layout) computed on the fly (no buffers), norms in
float32 (eps 1e-6), tied input/output embeddings, and for mlm/hybrid a Dense -> GELU -> norm
head transform before the tied projection.

Attention: AutoModelForCausalLM attends causally, AutoModelForMaskedLM bidirectionally,
and AutoModel as the family trains (causal for "causal", bidirectional otherwise). A hybrid's
masked-LM logits are not shifted: the token masked at position i is predicted at i-1
(the "mntp" backend of the official pipeline). AutoModel returns
`hidden_states[config.output_layer]` as `last_hidden_state`.

AutoModelForCausalLM generates (`GenerationMixin`) with a KV cache: each layer's keys and values
go into transformers' cache (`cache`, `past_key_values` before transformers 5), and with a cache
the positions count from each row's first unmasked token, so a left-padded batch generates as its
rows would alone (as babylm_jax's `sample` does).
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn
from transformers import GenerationMixin, PreTrainedModel
from transformers.cache_utils import DynamicCache
from transformers.modeling_outputs import BaseModelOutput, CausalLMOutputWithPast, MaskedLMOutput

from .configuration_babylm import BabyLMConfig

# the output field of the cache: "cache" from transformers 5, "past_key_values" before
CACHE_FIELD = "cache" if "cache" in CausalLMOutputWithPast.__dataclass_fields__ else "past_key_values"


class BabyLMNorm(nn.Module):
    """RMSNorm or LayerNorm (scale and bias), computed in float32."""

    def __init__(self, kind: str, dim: int, eps: float):
        super().__init__()
        if kind not in ("rmsnorm", "layernorm"):
            raise ValueError(f"config.norm: unknown norm {kind!r} (use 'rmsnorm' or 'layernorm')")
        self.kind = kind
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))
        self.bias = nn.Parameter(torch.zeros(dim)) if kind == "layernorm" else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x.float()
        if self.kind == "rmsnorm":
            h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
            return (h * self.weight.float()).to(x.dtype)
        h = F.layer_norm(h, h.shape[-1:], self.weight.float(), self.bias.float(), self.eps)
        return h.to(x.dtype)


def rotary_embedding(x_BxHxLxK: torch.Tensor, positions_BxL: torch.Tensor, theta: float) -> torch.Tensor:
    """Rotates channel pairs (i, i + K/2) by position-dependent angles, in float32."""
    k = x_BxHxLxK.shape[-1]
    freqs = 1.0 / (theta ** (torch.arange(0, k, 2, dtype=torch.float32, device=x_BxHxLxK.device) / k))
    angles_Bx1xLxK2 = (positions_BxL.float()[..., None] * freqs)[:, None]
    cos, sin = angles_Bx1xLxK2.cos(), angles_Bx1xLxK2.sin()
    x = x_BxHxLxK.float()
    x1, x2 = x[..., : k // 2], x[..., k // 2 :]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1).to(x_BxHxLxK.dtype)


class BabyLMAttention(nn.Module):
    def __init__(self, config: BabyLMConfig, layer_idx: int):
        super().__init__()
        self.layer_idx = layer_idx  # its keys and values in a cache
        d, self.num_heads = config.hidden_size, config.num_attention_heads
        self.head_dim = d // self.num_heads
        self.rope_theta = config.rope_theta
        self.q_proj = nn.Linear(d, d, bias=False)
        self.k_proj = nn.Linear(d, d, bias=False)
        self.v_proj = nn.Linear(d, d, bias=False)
        self.o_proj = nn.Linear(d, d, bias=False)

    def forward(self, x_BxLxD: torch.Tensor, positions_BxL: torch.Tensor, mask_Bx1xLxS: torch.Tensor,
                cache=None) -> torch.Tensor:
        """Attention of L new tokens over S keys: the cache's and theirs (S = L without a cache)."""
        b, length, d = x_BxLxD.shape

        def heads(t: torch.Tensor) -> torch.Tensor:
            return t.view(b, length, self.num_heads, self.head_dim).transpose(1, 2)

        q = rotary_embedding(heads(self.q_proj(x_BxLxD)), positions_BxL, self.rope_theta)
        k = rotary_embedding(heads(self.k_proj(x_BxLxD)), positions_BxL, self.rope_theta)
        v = heads(self.v_proj(x_BxLxD))
        if cache is not None:
            k, v = cache.update(k, v, self.layer_idx)
        scores_BxHxLxS = torch.matmul(q, k.transpose(-1, -2)).float() / math.sqrt(self.head_dim)
        scores_BxHxLxS = scores_BxHxLxS.masked_fill(~mask_Bx1xLxS, torch.finfo(torch.float32).min)
        probs_BxHxLxS = scores_BxHxLxS.softmax(dim=-1).to(v.dtype)
        out_BxLxD = torch.matmul(probs_BxHxLxS, v).transpose(1, 2).reshape(b, length, d)
        return self.o_proj(out_BxLxD)


class BabyLMMLP(nn.Module):
    """SwiGLU (silu(gate) * up) or exact-GELU feed-forward block, no biases."""

    def __init__(self, config: BabyLMConfig):
        super().__init__()
        if config.mlp not in ("swiglu", "gelu"):
            raise ValueError(f"config.mlp: unknown MLP {config.mlp!r} (use 'swiglu' or 'gelu')")
        d, f = config.hidden_size, config.intermediate_size
        self.kind = config.mlp
        self.gate_proj = nn.Linear(d, f, bias=False) if self.kind == "swiglu" else None
        self.up_proj = nn.Linear(d, f, bias=False)
        self.down_proj = nn.Linear(f, d, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.kind == "swiglu":
            return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))
        return self.down_proj(F.gelu(self.up_proj(x)))


class BabyLMLayer(nn.Module):
    """Pre-norm residual block: x + attn(norm(x)), then x + mlp(norm(x))."""

    def __init__(self, config: BabyLMConfig, layer_idx: int):
        super().__init__()
        self.input_layernorm = BabyLMNorm(config.norm, config.hidden_size, config.norm_eps)
        self.self_attn = BabyLMAttention(config, layer_idx)
        self.post_attention_layernorm = BabyLMNorm(config.norm, config.hidden_size, config.norm_eps)
        self.mlp = BabyLMMLP(config)

    def forward(self, x: torch.Tensor, positions_BxL: torch.Tensor, mask_Bx1xLxS: torch.Tensor,
                cache=None) -> torch.Tensor:
        x = x + self.self_attn(self.input_layernorm(x), positions_BxL, mask_Bx1xLxS, cache)
        return x + self.mlp(self.post_attention_layernorm(x))


class BabyLMPreTrainedModel(PreTrainedModel):
    config_class = BabyLMConfig
    base_model_prefix = "model"
    _no_split_modules = ["BabyLMLayer"]

    def _init_weights(self, module: nn.Module) -> None:
        std = self.config.initializer_range
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, mean=0.0, std=std)
            if getattr(module, "bias", None) is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, BabyLMNorm):
            nn.init.ones_(module.weight)
            if module.bias is not None:
                nn.init.zeros_(module.bias)


class BabyLMModel(BabyLMPreTrainedModel):
    """Embeddings, blocks and final norm; `last_hidden_state` = hidden_states[config.output_layer]."""

    _keys_to_ignore_on_load_unexpected = [r"^head\."]  # the LM head transform (mlm/hybrid)

    def __init__(self, config: BabyLMConfig):
        super().__init__(config)
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList([BabyLMLayer(config, i) for i in range(config.num_hidden_layers)])
        self.norm = BabyLMNorm(config.norm, config.hidden_size, config.norm_eps)
        self.post_init()

    def get_input_embeddings(self) -> nn.Embedding:
        return self.embed_tokens

    def set_input_embeddings(self, value: nn.Embedding) -> None:
        self.embed_tokens = value

    def encode(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None,
        position_ids: torch.Tensor | None,
        causal: bool,
        cache=None,
    ) -> tuple[torch.Tensor, ...]:
        """All hidden states of the new tokens: the input of each block (0 = embeddings), then the final
        normed output. With a `cache` the tokens follow those it holds; `attention_mask` covers both."""
        b, length = input_ids.shape
        device = input_ids.device
        past = cache.get_seq_length() if cache is not None else 0
        if position_ids is None and cache is not None and attention_mask is not None:
            position_ids = (attention_mask.long().cumsum(-1) - 1).clamp(min=0)[:, -length:]
        if position_ids is None:
            position_ids = (torch.arange(length, device=device) + past).expand(b, length)
        allowed_LxS = torch.ones(length, past + length, dtype=torch.bool, device=device)
        if causal:
            allowed_LxS = allowed_LxS.tril(diagonal=past)
        mask_Bx1xLxS = allowed_LxS.expand(b, 1, length, past + length)
        if attention_mask is not None:
            mask_Bx1xLxS = mask_Bx1xLxS & attention_mask.bool()[:, None, None, :]
        x = self.embed_tokens(input_ids)
        hidden_states = []
        for layer in self.layers:
            hidden_states.append(x)
            x = layer(x, position_ids, mask_Bx1xLxS, cache)
        hidden_states.append(self.norm(x))
        return tuple(hidden_states)

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
        **kwargs,
    ) -> BaseModelOutput | tuple:
        hidden_states = self.encode(input_ids, attention_mask, position_ids, causal=self.config.family == "causal")
        output_hidden_states = self.config.output_hidden_states if output_hidden_states is None else output_hidden_states
        output = BaseModelOutput(
            last_hidden_state=hidden_states[self.config.output_layer],
            hidden_states=hidden_states if output_hidden_states else None,
        )
        return output if return_dict is not False else output.to_tuple()


class BabyLMHeadTransform(nn.Module):
    """BERT-style Dense(D, bias) -> GELU -> norm before the tied projection (mlm/hybrid)."""

    def __init__(self, config: BabyLMConfig):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size, bias=True)
        self.norm = BabyLMNorm(config.norm, config.hidden_size, config.norm_eps)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(F.gelu(self.dense(x)))


class _BabyLMWithHead(BabyLMPreTrainedModel):
    """Shared body of the LM classes: logits = head(final hidden) @ embeddings^T, float32."""

    causal: bool
    output_class: type

    def __init__(self, config: BabyLMConfig):
        super().__init__(config)
        self.model = BabyLMModel(config)
        self.head = BabyLMHeadTransform(config) if config.family != "causal" else None
        self.post_init()

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                position_ids: torch.Tensor | None = None, output_hidden_states: bool | None = None,
                return_dict: bool | None = None, cache=None, past_key_values=None, use_cache: bool | None = None,
                **kwargs):
        cache = cache if cache is not None else past_key_values
        if cache is None and use_cache and self.causal:
            cache = DynamicCache()
        hidden_states = self.model.encode(input_ids, attention_mask, position_ids, self.causal, cache)
        final = hidden_states[-1]
        if self.head is not None:
            final = self.head(final)
        logits = F.linear(final.float(), self.model.embed_tokens.weight.float())
        output_hidden_states = self.config.output_hidden_states if output_hidden_states is None else output_hidden_states
        extra = {CACHE_FIELD: cache} if self.causal else {}
        output = self.output_class(logits=logits, hidden_states=hidden_states if output_hidden_states else None,
                                   **extra)
        return output if return_dict is not False else output.to_tuple()


class BabyLMForMaskedLM(_BabyLMWithHead):
    """Masked-LM logits with bidirectional attention (mlm and hybrid families)."""

    output_class = MaskedLMOutput
    causal = False


class BabyLMForCausalLM(_BabyLMWithHead, GenerationMixin):
    """Next-token logits with causal attention (causal and hybrid families); `generate()` with a KV cache."""

    output_class = CausalLMOutputWithPast
    causal = True

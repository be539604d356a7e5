"""Analytic FLOPs per token, the numerator of MFU (the denominator: `peaks.py`).

FLOP convention (as MaxText): a multiply-add is 2 FLOPs; training = 3 x forward (forward,
plus backward for activations and weights). Per token, forward =
  2 x (matmul weights: qkv, attention out, MLP)
+ 2 x (head transform + d_model x vocab, the tied output projection) at the positions that
  are predicted (all for causal models, the masked ones for the others; the embedding lookup
  is free)
+ attention: 4 x seq_len x d_model per layer (QK^T and PV), halved for causal rows
  (only the lower triangle is useful work).
"""
from __future__ import annotations

from babylm_jax.config.model import ModelConfig
from babylm_jax.config.schema import RunConfig
from babylm_jax.core.families import family_spec


def matmul_params(c: ModelConfig) -> int:
    """Weights that take part in matmuls, per token, excluding the output projection."""
    mlp = (3 if c.mlp == "swiglu" else 2) * c.d_model * c.d_ff
    per_layer = 4 * c.d_model * c.d_model + mlp
    head = c.d_model * c.d_model if c.has_head_transform else 0
    return c.num_layers * per_layer + head


def causal_share(config: RunConfig) -> float:
    """The share of rows that attend causally: 1 (causal), 0 (mlm), train.hybrid_causal_share (hybrid)."""
    return family_spec(config.model.family).causal_share(config.train.hybrid_causal_share)


def predicted_share(config: RunConfig, mask_rate: float) -> float:
    """The share of positions a step projects to the vocabulary: every one (causal), the masked
    ones (mlm: `mask_rate`), or the causal rows' and the masked ones (hybrid)."""
    share = causal_share(config)
    return share + (1.0 - share) * mask_rate


def forward_flops_per_token(c: ModelConfig, seq_len: int, causal_share: float, predicted_share: float = 1.0) -> float:
    """Forward FLOPs per token; `causal_share` is the fraction of rows attending causally,
    `predicted_share` the fraction of positions projected to the vocabulary (with the head
    transform, for mlm and hybrid models)."""
    attention = 4 * seq_len * c.d_model * c.num_layers * (1.0 - 0.5 * causal_share)
    head = c.d_model * c.d_model if c.has_head_transform else 0
    body = matmul_params(c) - head
    return 2 * body + 2 * predicted_share * (head + c.d_model * c.vocab_size) + attention


def train_flops_per_token(c: ModelConfig, seq_len: int, causal_share: float, predicted_share: float = 1.0) -> float:
    return 3 * forward_flops_per_token(c, seq_len, causal_share, predicted_share)

"""Curricula over the steps of a run: the sequence length and the masking rate at a step."""
from __future__ import annotations

import jax
import jax.numpy as jnp

from babylm_jax.config.training import TrainConfig


def seq_len_at(train: TrainConfig, step: int) -> int:
    """Sequence length of the curriculum phase containing `step` (default: train.seq_len)."""
    length = train.seq_len
    for start_share, phase_len in train.seq_len_curriculum:
        if step >= start_share * train.num_steps:
            length = phase_len
    return length


def mask_rate_at(train: TrainConfig, step: jax.Array) -> jax.Array:
    """Masking rate, linear from train.mask_rate to train.mask_rate_final over the run."""
    frac = jnp.clip(step / max(1, train.num_steps - 1), 0.0, 1.0)
    return train.mask_rate + (train.mask_rate_final - train.mask_rate) * frac

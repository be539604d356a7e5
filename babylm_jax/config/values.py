"""Values a user can set that no one means: refused by key before any work.

A negative learning rate trains (the loss climbs), a mask rate of 1.5 masks every token: each
key below has the range in which it means something, and `check_values` names the first one
outside it.
"""
from __future__ import annotations

import math
from typing import Any, Callable

import ml_collections

RULES: tuple[tuple[str, Callable[[Any], bool], str], ...] = (
    ("train.learning_rate", lambda v: v > 0, "must be > 0"),
    ("train.warmup_steps", lambda v: v >= 0, "must be >= 0"),
    ("train.min_lr_ratio", lambda v: 0 <= v <= 1, "must be in [0, 1]"),
    ("train.weight_decay", lambda v: v >= 0, "must be >= 0"),
    ("train.b1", lambda v: 0 <= v < 1, "must be in [0, 1)"),
    ("train.b2", lambda v: 0 <= v < 1, "must be in [0, 1)"),
    ("train.grad_clip", lambda v: v > 0, "must be > 0"),
    ("train.decay_share", lambda v: 0 < v < 1, "must be in (0, 1)"),
    ("train.z_loss", lambda v: v >= 0, "must be >= 0"),
    ("train.ema_decay", lambda v: 0 <= v < 1, "must be in [0, 1) (0 = no EMA)"),
    ("train.mask_rate", lambda v: 0 < v < 1, "must be in (0, 1)"),
    ("train.mask_rate_final", lambda v: 0 < v < 1, "must be in (0, 1)"),
    ("train.hybrid_causal_share", lambda v: 0 <= v <= 1, "must be in [0, 1]"),
    ("train.grad_accum_steps", lambda v: v >= 1, "must be >= 1"),
    ("train.log_every_steps", lambda v: v >= 1, "must be >= 1"),
    ("train.eval_every_steps", lambda v: v >= 1, "must be >= 1"),
    ("train.eval_batches", lambda v: v >= 1, "must be >= 1"),
    ("checkpoint.every_steps", lambda v: v >= 1, "must be >= 1"),
    ("checkpoint.max_to_keep", lambda v: v >= 1, "must be >= 1"),
)


def check_values(config: ml_collections.ConfigDict) -> None:
    """ValueError naming the first key of RULES whose value is out of its range (or not a number)."""
    for key, ok, rule in RULES:
        section, name = key.split(".")
        if section not in config or name not in config[section]:
            continue
        value = config[section][name]
        numeric = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
        if not numeric or not ok(value):
            raise ValueError(f"config key {key}={value!r} {rule}")

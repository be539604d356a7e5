"""Optimizers and learning-rate schedules built from `config.train`.

Schedules: "cosine" (linear warmup, cosine decay to `min_lr_ratio`) and "wsd" (warmup,
stable, then a linear decay over the last `decay_share` of steps). Optimizers: "adamw"
and "lamb". Weight decay applies to matmul kernels only (`transformer.weight_decay_mask`,
chosen by parameter name, the same mask as fine-tuning). Gradients are clipped by global
norm before the update. The names and ranges of the keys are checked once, by the schema
(`config.training.TrainConfig`).
"""
from __future__ import annotations

from absl import logging
import optax

from babylm_jax.config.training import TrainConfig
from babylm_jax.model.transformer import weight_decay_mask

OPTAX_OPTIMIZERS = {"adamw": optax.adamw, "lamb": optax.lamb}  # config.training.OPTIMIZERS, by name


def effective_warmup(train: TrainConfig) -> int:
    """`train.warmup_steps`, shortened to a tenth of the run when the run is shorter than it."""
    if train.warmup_steps >= train.num_steps:
        warmup = train.num_steps // 10
        logging.warning("train.warmup_steps=%d >= train.num_steps=%d: warming up for %d steps",
                        train.warmup_steps, train.num_steps, warmup)
        return warmup
    return train.warmup_steps


def make_schedule(train: TrainConfig) -> optax.Schedule:
    """The learning-rate schedule named by `train.schedule` ("cosine" or "wsd")."""
    peak, steps = train.learning_rate, train.num_steps
    floor = peak * train.min_lr_ratio
    warmup = effective_warmup(train)
    if train.schedule == "cosine":
        return optax.warmup_cosine_decay_schedule(0.0, peak, warmup, steps, end_value=floor)
    decay_steps = max(1, int(round(steps * train.decay_share)))
    stable_steps = steps - warmup - decay_steps
    if stable_steps < 0:
        raise ValueError("config keys train.warmup_steps + train.decay_share*num_steps exceed train.num_steps")
    return optax.join_schedules(
        [
            optax.linear_schedule(0.0, peak, warmup),
            optax.constant_schedule(peak),
            optax.linear_schedule(peak, floor, decay_steps),
        ],
        boundaries=[warmup, warmup + stable_steps],
    )


def make_train_optimizer(train: TrainConfig) -> optax.GradientTransformation:
    """Clip-by-global-norm followed by the optimizer named by `train.optimizer`."""
    opt = OPTAX_OPTIMIZERS[train.optimizer](make_schedule(train), b1=train.b1, b2=train.b2,
                                           weight_decay=train.weight_decay, mask=weight_decay_mask)
    return optax.chain(optax.clip_by_global_norm(train.grad_clip), opt)

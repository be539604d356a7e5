"""The optimizer of a run, in one place: its learning-rate schedule, the optimizer built from
`config.train`, and the update that applies it to the train state (with the EMA of the params).

    optimizer = make_train_optimizer(config.train)             # built once per run (`run.checked_parts`)
    state = apply_update(state, grads, optimizer, ema_decay)   # in the jitted train step (`step`)

Schedules: "cosine" (linear warmup, cosine decay to `min_lr_ratio`) and "wsd" (warmup,
stable, then a linear decay over the last `decay_share` of steps). Optimizers: "adamw"
and "lamb". Weight decay applies to matmul kernels only (`transformer.weight_decay_mask`,
chosen by parameter name, the same mask as fine-tuning). Gradients are clipped by global
norm before the update. The names and ranges of the keys are checked once, by the schema
(`config.training.TrainConfig`).
"""
from __future__ import annotations

from typing import Any

import jax
import optax
from absl import logging

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


def apply_update(state: Any, grads: Any, optimizer: optax.GradientTransformation, ema_decay: float) -> Any:
    """The train state (`state.TrainState`) one optimizer step on: new params and optimizer state, and the
    EMA params moved."""
    updates, opt_state = optimizer.update(grads, state.opt_state, state.params)
    params = optax.apply_updates(state.params, updates)
    ema = state.ema_params
    if ema is not None:
        ema = jax.tree.map(lambda e, p: ema_decay * e + (1.0 - ema_decay) * p, ema, params)
    return state.replace(step=state.step + 1, params=params, opt_state=opt_state, ema_params=ema)

"""The train state (step, params, optimizer state, optional EMA params), its creation and its size;
the optimizer and learning-rate schedule that update it, built from `config.train`.

Schedules: "cosine" (linear warmup, cosine decay to `min_lr_ratio`) and "wsd" (warmup,
stable, then a linear decay over the last `decay_share` of steps). Optimizers: "adamw"
and "lamb". Weight decay applies to matmul kernels only (`transformer.weight_decay_mask`,
chosen by parameter name, the same mask as fine-tuning). Gradients are clipped by global
norm before the update. The names and ranges of the keys are checked once, by the schema
(`config.training.TrainConfig`).
"""
from __future__ import annotations

import math
from typing import Any, Callable

import flax
import flax.linen as nn
import jax
import jax.numpy as jnp
import optax
from absl import logging

from babylm_jax.config.model import ModelConfig
from babylm_jax.config.schema import RunConfig
from babylm_jax.config.training import TrainConfig
from babylm_jax.model import attention, aux_heads
from babylm_jax.model.transformer import Transformer, weight_decay_mask
from babylm_jax.training import sharding


@flax.struct.dataclass
class TrainState:
    step: jax.Array
    params: Any
    opt_state: Any
    ema_params: Any  # None when train.ema_decay == 0


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


def state_bytes(tree: Any) -> int:
    """The bytes of every array in `tree`, concrete or abstract (shape and dtype): what a checkpoint of a
    train state writes before compression (`disk_space`), what it holds on a device (`aot_report`)."""
    return sum(math.prod(leaf.shape) * jnp.dtype(leaf.dtype).itemsize
               for leaf in jax.tree.leaves(tree) if hasattr(leaf, "dtype"))


def build_model(model: ModelConfig, platform: str | None = None, strict: bool = True) -> Transformer:
    """The Transformer of `model` (the run's `model.*`), model.attention resolved for `platform`
    (default: the running backend's; `strict`: see `attention.for_platform`)."""
    platform = platform or attention.platform_of(jax.default_backend())
    return Transformer(attention.for_platform(model, platform, strict))


def boxed_init_fn(
    config: RunConfig, model: Transformer, optimizer: optax.GradientTransformation
) -> Callable[[jax.Array], TrainState]:
    """A function rng -> TrainState whose params keep their logical-partitioning boxes."""

    def init(rng: jax.Array) -> TrainState:
        tokens = jnp.zeros((1, min(8, config.train.seq_len)), jnp.int32)
        params = model.init(rng, tokens)
        heads = aux_heads.init_params(config.train, config.model.d_model, jax.random.fold_in(rng, 1))
        if heads is not None:  # a collection of their own: never read by the model, evaluation or export
            params = {**params, aux_heads.AUX_COLLECTION: heads}
        ema = params if config.train.ema_decay > 0 else None
        return TrainState(step=jnp.zeros((), jnp.int32), params=params, opt_state=optimizer.init(params), ema_params=ema)

    return init


def abstract_state(config: RunConfig) -> tuple[TrainState, Transformer]:
    """Shapes and dtypes of the (unboxed) train state, without allocating it; the model for evaluating
    it here (a run trained with model.attention="cudnn" loads on a CPU with the attention "auto" takes)."""
    model = build_model(config.model, strict=False)
    init = boxed_init_fn(config, model, make_train_optimizer(config.train))
    return jax.eval_shape(lambda rng: nn.meta.unbox(init(rng)), jax.random.key(0)), model


def sharded_init(
    config: RunConfig, model: Transformer, optimizer: optax.GradientTransformation, mesh
) -> tuple[Callable[[jax.Array], TrainState], Any, TrainState]:
    """(jitted rng -> unboxed TrainState laid out on `mesh`, its shardings, its sharded shapes)."""
    init = boxed_init_fn(config, model, optimizer)
    shardings = sharding.state_shardings(jax.eval_shape(init, jax.random.key(0)), mesh)
    init_unboxed = jax.jit(lambda rng: nn.meta.unbox(init(rng)), out_shardings=shardings)
    abstract = jax.tree.map(
        lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s),
        jax.eval_shape(init_unboxed, jax.random.key(0)), shardings,
    )
    return init_unboxed, shardings, abstract

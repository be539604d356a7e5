"""The train state (step, params, optimizer state, optional EMA params), the model it holds the
params of (`build_model`), its creation (sharded, or abstract) and its size. The optimizer that
updates it is `optimizer`'s.
"""
from __future__ import annotations

import dataclasses

import math
from typing import Any, Callable

import flax
import flax.linen as nn
import jax
import jax.numpy as jnp
import optax

from babylm_jax.config.model import ModelConfig
from babylm_jax.config.schema import RunConfig
from babylm_jax.model import attention, aux_heads
from babylm_jax.model.transformer import Transformer
from babylm_jax.training import sharding
from babylm_jax.training.optimizer import make_train_optimizer


@flax.struct.dataclass
class TrainState:
    step: jax.Array
    params: Any
    opt_state: Any
    ema_params: Any  # None when train.ema_decay == 0


def state_bytes(tree: Any) -> int:
    """The bytes of every array in `tree`, concrete or abstract (shape and dtype): what a checkpoint of a
    train state writes before compression (`disk_space`), what it holds on a device (`aot_report`)."""
    return sum(math.prod(leaf.shape) * jnp.dtype(leaf.dtype).itemsize
               for leaf in jax.tree.leaves(tree) if hasattr(leaf, "dtype"))


def build_model(model: ModelConfig, platform: str | None = None, strict: bool = True) -> Transformer:
    """The Transformer of `model` (the run's `model.*`), model.attention resolved for `platform`
    (default: the running backend's; `strict`: see `attention.for_platform`), and model.norm_kernel:
    "pallas" runs in interpret mode on a CPU and is refused on a TPU."""
    platform = platform or attention.platform_of(jax.default_backend())
    if model.norm_kernel == "pallas" and platform in ("cpu", "tpu"):
        if platform == "tpu":
            raise ValueError("config key model.norm_kernel='pallas' runs on GPUs (Triton) and CPUs (interpret "
                             "mode), not on TPUs: use 'xla'")
        model = dataclasses.replace(model, norm_kernel="pallas_interpret")
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

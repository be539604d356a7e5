"""The jitted steps: the train step (the loss and its gradient, with accumulation, then the optimizer
update of `optimizer.apply_update`), the eval step, the loss settings they build from the run's config
(`loss_settings`: the model code reads no RunConfig), and the curricula over a run's steps (its row
length and masking rate at a step).

    step = make_train_step(config, model, optimizer, masking, length)   # (state, batch, rng) -> (state, metrics)
    eval_step = make_eval_step(config, model, masking)                   # (params, batch) -> (loss sum, tokens)

Training (`compiled.StepPrograms`), the compile-only reports (`aot_report`) and the
benchmarks build their steps here, so each measures the step a run takes.
"""
from __future__ import annotations

from typing import Any, Callable

import jax
import jax.numpy as jnp
import optax

from babylm_jax.config.data import DataConfig
from babylm_jax.config.schema import RunConfig
from babylm_jax.config.training import MeshConfig, TrainConfig
from babylm_jax.model import aux_heads, objectives
from babylm_jax.model.attention import platform_of
from babylm_jax.model.loss import loss_chunk
from babylm_jax.model.objectives import Batch, LossSettings, MaskingConfig
from babylm_jax.model.transformer import Transformer
from babylm_jax.training import sharding
from babylm_jax.training.optimizer import apply_update, make_schedule
from babylm_jax.training.state import TrainState

TrainStep = Callable[[TrainState, Batch, jax.Array], tuple[TrainState, dict[str, jax.Array]]]  # (state, batch, rng)
EvalStep = Callable[[Any, Batch], tuple[jax.Array, jax.Array]]  # (params, batch) -> (summed loss, predicted tokens)


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


def make_masking(data: DataConfig, tokenizer: Any) -> MaskingConfig:
    return MaskingConfig(
        mask_id=tokenizer.mask_id,
        vocab_size=tokenizer.vocab_size,
        special_ids=tuple(tokenizer.special_ids),
        whole_word=data.whole_word_masking,
    )


def reshape_rows(batch: Batch, length: int) -> Batch:
    """Splits [B, L] rows into [B * L/length, length] rows (sequence-length curriculum)."""
    out = {}
    for k, v in batch.items():
        if v.ndim == 2 and v.shape[1] != length:
            out[k] = v.reshape(-1, length)
        else:
            out[k] = v
    return out


def row_groups(mesh: MeshConfig) -> int:
    """The devices a batch's rows are split over (`sharding.batch_sharding`): the loss gathers
    and projects each device's rows on that device (`objectives.compute_loss`)."""
    if jax.process_count() > 1:
        return jax.device_count()
    return len(sharding.run_devices(mesh, jax.devices()))


def step_key(train: TrainConfig) -> jax.Array:
    """The train step's key, of `train.rng_impl` (the step folds in its number, then its micro-batch's)."""
    return jax.random.fold_in(jax.random.key(train.seed, impl=train.rng_impl), 1)


def step_platform(platform: str | None = None) -> str:
    """The platform a step is built for: `platform`, else the running backend's ("cpu", "cuda", "tpu")."""
    return platform or platform_of(jax.default_backend())


def loss_settings(config: RunConfig, masking: MaskingConfig, platform: str | None = None,
                  groups: int | None = None) -> LossSettings:
    """The train step's loss settings: `config.train`'s, loss chunks for `platform` (`loss.loss_chunk`;
    default: this backend; "pallas" kernels in interpret mode on a CPU, refused on a TPU), `groups` row
    groups (default: the mesh's), dropout where model.dropout asks for it, the sum where
    train.grad_accum_steps accumulates."""
    train = config.train
    platform = step_platform(platform)
    if train.loss_kernel == "pallas" and platform == "tpu":
        raise ValueError("config key train.loss_kernel='pallas' runs on GPUs (Triton) and CPUs (interpret mode), "
                         "not on TPUs: use 'blockwise' or 'xla'")
    return LossSettings(masking=masking, hybrid_causal_share=train.hybrid_causal_share,
                        max_mask_rate=max(train.mask_rate, train.mask_rate_final), z_loss=train.z_loss,
                        deterministic=config.model.dropout == 0.0,
                        chunk=loss_chunk(platform, config.model.vocab_size, train.loss_chunk),
                        kernel=train.loss_kernel, interpret=platform == "cpu",
                        logits_dtype=jnp.dtype(train.loss_logits_dtype), row_groups=groups or row_groups(config.mesh),
                        summed=train.grad_accum_steps > 1)


def make_train_step(config: RunConfig, model: Transformer, optimizer: optax.GradientTransformation,
                    masking: MaskingConfig, length: int, platform: str | None = None, groups: int | None = None,
                    aux_objective: aux_heads.AuxObjective | None = None) -> TrainStep:
    """A pure (state, batch, rng) -> (state, metrics) step with gradient accumulation, for
    `platform` (loss chunks; default: this backend) and `groups` row groups (default: the mesh's),
    with the auxiliary heads of `aux_objective` (train.aux_heads)."""
    train = config.train
    schedule = make_schedule(train)
    accum = train.grad_accum_steps
    settings = loss_settings(config, masking, platform, groups)

    def loss_fn(params: Any, micro: Batch, rng: jax.Array, step: jax.Array) -> tuple[jax.Array, dict[str, Any]]:
        return objectives.compute_loss(model, params, micro, rng, mask_rate=mask_rate_at(train, step),
                                       settings=settings, aux_objective=aux_objective)

    grad_fn = jax.value_and_grad(loss_fn, has_aux=True)

    def step_fn(state: TrainState, batch: Batch, rng: jax.Array) -> tuple[TrainState, dict[str, jax.Array]]:
        batch = reshape_rows(batch, length)
        rng = jax.random.fold_in(rng, state.step)
        if accum == 1:  # no loop: XLA optimises the step as one computation
            (_, aux), grads = grad_fn(state.params, batch, jax.random.fold_in(rng, 0), state.step)
            predicted, loss, aux_sums = aux["predicted_tokens"], aux["loss"], aux.get("aux", {})
        else:
            # Micro-batch i takes rows i, i+accum, ...: every device keeps a share of each one.
            # Summed losses and gradients, divided once by all predicted tokens: the mean over
            # the whole batch, as one pass would give (not a mean of the micro-batches' means).
            micro_batches = jax.tree.map(lambda x: jnp.swapaxes(x.reshape(-1, accum, *x.shape[1:]), 0, 1), batch)

            def accumulate(carry, xs):
                grads_sum, loss_sum, predicted, aux_sums = carry
                micro, i = xs
                (_, aux), grads = grad_fn(state.params, micro, jax.random.fold_in(rng, i), state.step)
                return (jax.tree.map(jnp.add, grads_sum, grads), loss_sum + aux["lm_loss_sum"],
                        predicted + aux["predicted_tokens"], jax.tree.map(jnp.add, aux_sums, aux.get("aux", {}))), None

            zeros = jax.tree.map(jnp.zeros_like, state.params)
            aux_zeros = {name: jnp.zeros(3, jnp.float32) for name in (aux_objective.config.names if aux_objective else ())}
            (grads, loss_sum, predicted, aux_sums), _ = jax.lax.scan(
                accumulate, (zeros, jnp.float32(0.0), jnp.float32(0.0), aux_zeros), (micro_batches, jnp.arange(accum)))
            count = jnp.maximum(predicted, 1.0)
            grads = jax.tree.map(lambda g: g / count, grads)
            loss = loss_sum / count
        return apply_update(state, grads, optimizer, train.ema_decay), {
            "loss": loss,
            "grad_norm": optax.tree.norm(grads),
            "learning_rate": schedule(state.step),
            "predicted_tokens": predicted,
            **aux_heads.step_metrics(aux_sums),
        }

    return step_fn


def make_eval_step(config: RunConfig, model: Transformer, masking: MaskingConfig, platform: str | None = None,
                   groups: int | None = None) -> EvalStep:
    """(params, batch) -> (summed loss, predicted tokens) with fixed masking randomness."""
    settings = loss_settings(config, masking, platform, groups).for_evaluation()

    def eval_step(params: Any, batch: Batch) -> tuple[jax.Array, jax.Array]:
        loss, aux = objectives.compute_loss(model, params, batch, jax.random.key(12345),
                                            mask_rate=config.train.mask_rate_final, settings=settings)
        return loss * aux["predicted_tokens"], aux["predicted_tokens"]

    return eval_step


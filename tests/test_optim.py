"""Learning-rate schedules and optimizers built from `config.train`."""
import dataclasses
import pathlib

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax
import pytest
from conftest import tiny_config

from babylm_jax.config import training as train_schema
from babylm_jax.config.schema import RunConfig
from babylm_jax.config.training import TrainConfig
from babylm_jax.eval.finetune import classifier
from babylm_jax.training.optimizer import OPTAX_OPTIMIZERS, effective_warmup, make_schedule, make_train_optimizer
from babylm_jax.training.state import build_model


def train_config(**overrides) -> TrainConfig:
    values = dict(learning_rate=1.0, num_steps=100, warmup_steps=10, min_lr_ratio=0.1, schedule="cosine",
                  decay_share=0.2, optimizer="adamw", b1=0.9, b2=0.95, weight_decay=0.1, grad_clip=1.0)
    values.update(overrides)
    return dataclasses.replace(RunConfig.from_config(tiny_config(pathlib.Path("unused"))).train, **values)


def test_cosine_warms_up_then_decays_to_the_floor():
    schedule = make_schedule(train_config())
    assert float(schedule(0)) == 0.0 and float(schedule(5)) == pytest.approx(0.5)
    assert float(schedule(10)) == pytest.approx(1.0)
    assert float(schedule(55)) == pytest.approx(0.55, abs=1e-6)  # halfway down the cosine: (1 + 0.1) / 2
    assert float(schedule(100)) == pytest.approx(0.1)


def test_warmup_stable_decay():
    schedule = make_schedule(train_config(schedule="wsd"))
    assert float(schedule(5)) == pytest.approx(0.5)
    assert [float(schedule(s)) for s in (10, 40, 80)] == pytest.approx([1.0, 1.0, 1.0])  # stable until 80
    assert float(schedule(90)) == pytest.approx(0.55)  # linear decay over the last 20 steps
    assert float(schedule(100)) == pytest.approx(0.1)


def test_short_runs_shorten_the_warmup():
    assert effective_warmup(train_config(num_steps=20, warmup_steps=30)) == 2


def test_the_schema_and_the_optimizers_name_the_same_optimizers():
    assert tuple(OPTAX_OPTIMIZERS) == train_schema.OPTIMIZERS


def _model_params(scan_layers: bool) -> dict:
    """Real (unboxed) parameters of a tiny encoder with LayerNorm: kernels, scales and biases."""
    config = tiny_config(pathlib.Path("unused"), family="mlm")
    config.model.update(norm="layernorm", scan_layers=scan_layers)
    model = build_model(RunConfig.from_config(config).model)
    return nn.meta.unbox(model.init(jax.random.key(0), jnp.zeros((1, 8), jnp.int32)))


def _decayed_leaves(optimizer: optax.GradientTransformation, params: dict) -> set[str]:
    """Names of the leaves that move under zero gradients (pure weight decay)."""
    updates, _ = optimizer.update(jax.tree.map(jnp.zeros_like, params), optimizer.init(params), params)
    moved = jax.tree_util.tree_flatten_with_path(jax.tree.map(lambda u: bool(jnp.any(u != 0)), updates))[0]
    return {jax.tree_util.keystr(path) for path, flag in moved if flag}


@pytest.mark.slow
def test_finetuning_decays_every_parameter_as_torch_adamw_does():
    params = jax.tree.map(lambda x: x + 1.0, _model_params(False))  # no leaf at zero, where decay cannot move it
    for clip in (0.0, 1.0):
        optimizer = classifier.finetune_optimizer(classifier.StepSettings(weight_decay=0.5, max_grad_norm=clip))
        every = {jax.tree_util.keystr(p) for p, _ in jax.tree_util.tree_flatten_with_path(params)[0]}
        assert _decayed_leaves(optimizer, params) == every


@pytest.mark.slow
@pytest.mark.parametrize("scan_layers", [False, True])
@pytest.mark.parametrize("name", ["adamw", "lamb"])
def test_weight_decay_reaches_matmul_kernels_only(name, scan_layers):
    params = _model_params(scan_layers)
    optimizer = make_train_optimizer(train_config(optimizer=name, warmup_steps=0, weight_decay=0.5))
    decayed = _decayed_leaves(optimizer, params)
    kernels = {jax.tree_util.keystr(p) for p, _ in jax.tree_util.tree_flatten_with_path(params)[0]
               if jax.tree_util.keystr(p).endswith("['kernel']")}
    assert len(kernels) >= 5 and decayed == kernels  # not the embedding, norm scales or biases (2-D under scan)

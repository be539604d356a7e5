"""The train step's options: gradient accumulation, the sequence-length curriculum, its random bits and loss logits."""
import dataclasses

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import tiny_config

from babylm_jax.config.schema import RunConfig
from babylm_jax.model import objectives
from babylm_jax.model.loss import projected_cross_entropy
from babylm_jax.training import run
from babylm_jax.training.checkpoints import word_milestones
from babylm_jax.training.step import make_train_step, seq_len_at, step_key
from fixtures.layer_params import stack_layer_params, unstack_layer_params
from babylm_jax.training.optimizer import make_train_optimizer
from babylm_jax.training.state import TrainState, boxed_init_fn, build_model

MASKING = objectives.MaskingConfig(mask_id=4, vocab_size=64, special_ids=(0, 1, 2, 3, 4, 5, 6))


def _setup(tmp_path, **train):
    config = tiny_config(tmp_path)
    config.train.update(warmup_steps=0, **train)  # a real update at step 0
    config = RunConfig.from_config(config)
    model = build_model(config.model)
    optimizer = make_train_optimizer(config.train)
    state = jax.jit(lambda rng: nn.meta.unbox(boxed_init_fn(config, model, optimizer)(rng)))(jax.random.key(0))
    return config, model, optimizer, state


def _batch(rows: int, length: int) -> dict:
    tokens = jax.random.randint(jax.random.key(1), (rows, length), 7, 64)
    return {
        "tokens": tokens,
        "segment_ids": jnp.ones((rows, length), jnp.int32),
        "positions": jnp.broadcast_to(jnp.arange(length), (rows, length)),
    }


def _max_diff(a, b) -> float:
    return max(jax.tree.leaves(jax.tree.map(lambda x, y: float(jnp.abs(x - y).max()), a, b)))


@pytest.mark.slow
def test_gradient_accumulation_equals_one_big_batch(tmp_path):
    batch = _batch(8, 32)
    # Micro-batch 0 (rows 0 and 4) predicts fewer tokens than the others: the step's loss is the
    # mean over all predicted tokens, not the mean of the micro-batches' means.
    batch["segment_ids"] = batch["segment_ids"].at[jnp.array([0, 4]), 10:].set(0)
    results = {}
    for accum in (1, 4):
        config, model, optimizer, state = _setup(tmp_path, grad_accum_steps=accum)
        step = jax.jit(make_train_step(config, model, optimizer, MASKING, 32))
        results[accum] = step(state, batch, jax.random.key(2))
    (state1, metrics1), (state4, metrics4) = results[1], results[4]
    np.testing.assert_allclose(metrics1["loss"], metrics4["loss"], rtol=1e-5)
    np.testing.assert_allclose(metrics1["grad_norm"], metrics4["grad_norm"], rtol=1e-5)
    # Adam's first step is about lr * sign(g): entries with |g| near eps may differ by float rounding.
    assert _max_diff(state1.params, state4.params) < 1e-3
    assert _max_diff(state1.params, _setup(tmp_path)[3].params) > 5e-3  # the step did move the params



def test_hybrid_passes_too_small_for_a_causal_row_are_refused(tmp_path):
    config = tiny_config(tmp_path, family="hybrid")  # 8 rows, a quarter of them causal
    config.train.grad_accum_steps = 8
    with pytest.raises(ValueError, match="hybrid_causal_share=0.25 of 1 rows a pass"):
        RunConfig.from_config(config)
    config.train.grad_accum_steps = 4  # 2 rows a pass: round(0.5) is 0 too
    with pytest.raises(ValueError, match="rounds to no causal row"):
        RunConfig.from_config(config)
    config.train.grad_accum_steps = 2
    run.checked_parts(RunConfig.from_config(config))

@pytest.mark.slow
def test_sequence_length_curriculum_splits_rows(tmp_path):
    config, model, optimizer, state = _setup(tmp_path, seq_len_curriculum=((0.0, 16), (0.5, 32)))
    assert seq_len_at(config.train, 0) == 16
    assert seq_len_at(config.train, config.train.num_steps // 2) == 32
    batch = _batch(4, 32)
    short = jax.jit(make_train_step(config, model, optimizer, MASKING, 16))
    _, metrics_split = short(state, batch, jax.random.key(3))
    # Reference: the 8 half rows as separate sequences, positions from 0 (nothing crosses a split).
    halves = {"tokens": batch["tokens"].reshape(8, 16), "segment_ids": jnp.ones((8, 16), jnp.int32),
              "positions": jnp.broadcast_to(jnp.arange(16), (8, 16))}
    reference, _ = objectives.compute_loss(model, state.params, halves, jax.random.key(0),
                                           settings=objectives.LossSettings(masking=MASKING))
    np.testing.assert_allclose(metrics_split["loss"], reference, rtol=1e-5)
    _, metrics_long = jax.jit(make_train_step(config, model, optimizer, MASKING, 32))(state, batch, jax.random.key(3))
    assert abs(float(metrics_long["loss"]) - float(metrics_split["loss"])) > 1e-4  # longer context, other loss


def test_word_milestones_follow_the_babylm_schedule():
    import itertools

    millions = [m / 1e6 for m in itertools.islice(word_milestones(1e6), 21)]
    assert millions == [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 20, 30, 40, 50, 60, 70, 80, 90, 100, 200, 300]


@pytest.mark.parametrize("family", ["causal", "mlm", "hybrid"])
@pytest.mark.slow
def test_scanned_and_looped_layers_train_to_the_same_parameters(tmp_path, family):
    """Same initialisation, same batches: `nn.scan` over layers changes nothing, weight decay included."""
    config = tiny_config(tmp_path, family=family)
    config.model.norm = "layernorm"  # scales and biases, [layers, d] under scan
    config.train.update(warmup_steps=0, weight_decay=0.5, learning_rate=1e-2)
    run_config = RunConfig.from_config(config)
    looped_model = build_model(run_config.model)
    optimizer = make_train_optimizer(run_config.train)
    looped = jax.jit(lambda rng: nn.meta.unbox(boxed_init_fn(run_config, looped_model, optimizer)(rng)))(
        jax.random.key(0))
    config.model.scan_layers = True
    scanned_model = build_model(RunConfig.from_config(config).model)
    params = stack_layer_params(looped.params, config.model.num_layers)
    scanned = TrainState(step=looped.step, params=params, opt_state=optimizer.init(params), ema_params=None)
    for model, name in ((looped_model, "looped"), (scanned_model, "scanned")):
        step = jax.jit(make_train_step(run_config, model, optimizer, MASKING, 32))
        state = looped if name == "looped" else scanned
        for i in range(3):
            state, _ = step(state, _batch(8, 32), jax.random.key(i))
        if name == "looped":
            looped_after = state.params
        else:
            scanned_after = unstack_layer_params(state.params, config.model.num_layers)
    assert _max_diff(looped_after, scanned_after) < 1e-5
    assert _max_diff(looped_after, looped.params) > 1e-3  # the steps did move the params


def test_the_step_key_follows_train_rng_impl_and_its_dropout_bits_differ(tmp_path):
    """train.rng_impl picks the step's random bits: an rbg key trains (dropout on), draws
    other bits than threefry's, and the same key twice gives the same step."""
    batch = _batch(4, 32)
    results = {}
    for impl in ("threefry2x32", "rbg"):
        config, model, optimizer, state = _setup(tmp_path, rng_impl=impl)
        key = step_key(config.train)
        assert str(jax.random.key_impl(key)) == impl
        dropout_config = dataclasses.replace(config, model=dataclasses.replace(config.model, dropout=0.5))
        dropout_model = build_model(dropout_config.model)
        step = jax.jit(make_train_step(dropout_config, dropout_model, optimizer, MASKING, 32))
        results[impl] = [step(state, batch, key)[1]["loss"] for _ in range(2)]
    for impl, (first, second) in results.items():
        assert float(first) == float(second), impl
    assert float(results["threefry2x32"][0]) != float(results["rbg"][0])


def test_bfloat16_loss_logits_keep_the_loss_and_gradient_close():
    """train.loss_logits_dtype=bfloat16 stores a chunk's logits in bf16: the loss and both
    gradients stay within bf16 rounding of the float32 ones, with float32 reductions."""
    keys = jax.random.split(jax.random.key(3), 3)
    x = jax.random.normal(keys[0], (96, 32))
    embed = 0.3 * jax.random.normal(keys[1], (200, 32))
    targets = jax.random.randint(keys[2], (96,), 0, 200)
    weights = jnp.ones(96)

    def loss(dtype):
        return jax.value_and_grad(projected_cross_entropy, argnums=(0, 1))(
            x, embed, targets, weights, 0.0, 32, 1, jnp.float32, dtype)

    (exact, (gx, ge)), (rounded, (rx, re_)) = loss(jnp.float32), loss(jnp.bfloat16)
    assert float(rounded) != float(exact)  # the logits were stored in bf16
    np.testing.assert_allclose(rounded, exact, rtol=2e-3)
    np.testing.assert_allclose(rx, gx, atol=5e-3 * float(jnp.abs(gx).max()))  # bf16: 2^-8 relative
    np.testing.assert_allclose(re_, ge, atol=5e-3 * float(jnp.abs(ge).max()))

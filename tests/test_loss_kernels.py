"""train.loss_kernel: "blockwise" and "pallas" (interpret mode here) give the loss and gradients of the
full-logits cross-entropy, alone and inside every family's objective with the auxiliary heads."""
import dataclasses

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from babylm_jax.config.model import ModelConfig
from babylm_jax.config.training import AUX_HEADS
from babylm_jax.model import aux_heads, loss, objectives
from babylm_jax.model.fused_loss import fused_cross_entropy
from babylm_jax.model.transformer import Transformer

N, V, D = 37, 50, 24  # rows, vocabulary and width that no block divides: padding is exercised


def _problem(seed=0):
    k = jax.random.split(jax.random.key(seed), 4)
    x = jax.random.normal(k[0], (N, D))
    embed = jax.random.normal(k[1], (V, D)) * 0.5
    targets = jax.random.randint(k[2], (N,), 0, V)
    weights = (jax.random.uniform(k[3], (N,)) > 0.3).astype(jnp.float32)
    return x, embed, targets, weights


KERNELS = {
    "blockwise": lambda x, e, t, w, z, dtype: loss.blockwise_cross_entropy(x, e, t, w, z, 16, dtype),
    "pallas": lambda x, e, t, w, z, dtype: fused_cross_entropy(x, e, t, w, z, dtype, True),
}


@pytest.mark.parametrize("kernel", sorted(KERNELS))
@pytest.mark.parametrize("z_loss", [0.0, 1e-2])
def test_kernel_equals_full_logits_in_value_and_gradients(kernel, z_loss):
    x, embed, targets, weights = _problem()

    def reference(x, e):
        return loss.cross_entropy((x @ e.T)[None], targets[None], weights[None], z_loss)[0]

    expected, expected_grads = jax.value_and_grad(reference, (0, 1))(x, embed)
    value, grads = jax.value_and_grad(lambda x, e: KERNELS[kernel](x, e, targets, weights, z_loss, jnp.float32),
                                      (0, 1))(x, embed)
    np.testing.assert_allclose(value, expected, rtol=1e-5)
    for got, want in zip(grads, expected_grads):
        np.testing.assert_allclose(got, want, atol=1e-5)
    assert float(jnp.abs(grads[1][targets[weights > 0]]).max()) > 1e-2  # the target rows' gradient is there


@pytest.mark.parametrize("kernel", sorted(KERNELS))
def test_bf16_matmuls_stay_within_bf16_rounding(kernel):
    x, embed, targets, weights = _problem(1)
    exact, exact_grads = jax.value_and_grad(
        lambda x, e: loss.cross_entropy((x @ e.T)[None], targets[None], weights[None])[0], (0, 1))(x, embed)
    value, grads = jax.value_and_grad(lambda x, e: KERNELS[kernel](x, e, targets, weights, 0.0, jnp.bfloat16),
                                      (0, 1))(x, embed)
    np.testing.assert_allclose(value, exact, rtol=1e-2)
    for got, want in zip(grads, exact_grads):
        assert got.dtype == jnp.float32
        np.testing.assert_allclose(got, want, atol=3e-2 * float(jnp.abs(want).max()))


def test_vocab_blocks_fill_the_byte_budget_and_cover_the_vocabulary():
    assert loss.vocab_block(65_536, 32_768) == loss.BLOCKWISE_BYTES // (4 * 65_536)
    assert loss.vocab_block(10, 50) == 56  # the whole (padded) vocabulary when it fits
    assert loss.vocab_block(10**9, 50) == 8


SPECIAL = (0, 1, 2, 3, 4)
MASKING = objectives.MaskingConfig(mask_id=4, vocab_size=V, special_ids=SPECIAL)


def _aux_objective(position):
    rng = np.random.default_rng(0)
    sizes = {"tone": 5, "radical": 7}
    labels = np.stack([rng.integers(-1, sizes.get(name, 1), V) for name in AUX_HEADS], axis=1).astype(np.int32)
    return aux_heads.AuxObjective(aux_heads.AuxHeadsConfig((("tone", 0.5), ("radical", 1.0)), position), sizes, labels)


@pytest.mark.parametrize("family", ["causal", "mlm", "hybrid"])
def test_every_family_and_the_aux_heads_train_alike_with_each_kernel(family, monkeypatch):
    monkeypatch.setattr(loss, "BLOCKWISE_BYTES", 4 * 16 * 8)  # blocks of 8 entries: several, the last padded
    model = Transformer(ModelConfig(family=family, vocab_size=V, d_model=32, num_layers=1, num_heads=2, d_ff=48))
    tokens = jax.random.randint(jax.random.key(1), (4, 8), 5, V)
    batch = {"tokens": tokens, "segment_ids": jnp.ones_like(tokens).at[3, 6:].set(0),
             "positions": jnp.broadcast_to(jnp.arange(8), tokens.shape)}
    objective = _aux_objective("target" if family != "causal" else "input")
    params = nn.meta.unbox(model.init(jax.random.key(0), tokens))
    params = {**params, aux_heads.AUX_COLLECTION: objective.init(jax.random.key(2), 32)}
    base = objectives.LossSettings(masking=MASKING, hybrid_causal_share=0.25, max_mask_rate=0.5, z_loss=1e-3,
                                   chunk=8, interpret=True)

    def run(kernel):
        settings = dataclasses.replace(base, kernel=kernel)
        fn = lambda p: objectives.compute_loss(model, p, batch, jax.random.key(3), mask_rate=0.5,  # noqa: E731
                                               settings=settings, aux_objective=objective)
        return jax.value_and_grad(fn, has_aux=True)(params)

    (expected, expected_metrics), expected_grads = run("xla")
    assert float(expected_metrics["predicted_tokens"]) > 0
    for kernel in ("blockwise", "pallas"):
        (value, metrics), grads = run(kernel)
        np.testing.assert_allclose(value, expected, rtol=1e-5)
        np.testing.assert_allclose(metrics["loss"], expected_metrics["loss"], rtol=1e-5)
        jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, atol=1e-5), grads, expected_grads)

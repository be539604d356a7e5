"""model.norm_kernel="pallas" (interpret mode here): the residual add, the norm and the cast in one
kernel give the XLA norms' values and gradients, alone and inside a model with the same parameters."""
import dataclasses

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from babylm_jax.config.model import ModelConfig
from babylm_jax.model import objectives
from babylm_jax.model.fused_norm import add_norm
from babylm_jax.training.state import build_model


def _reference(x, h, scale, bias, rms):
    y = x + h.astype(jnp.float32) if h is not None else x
    mean = 0.0 if rms else jnp.mean(y, -1, keepdims=True)
    var = jnp.mean(jnp.square(y - mean), -1, keepdims=True)
    out = (y - mean) * jax.lax.rsqrt(var + 1e-6) * scale + (0.0 if rms else bias)
    return y, out.astype(jnp.bfloat16)


@pytest.mark.parametrize("rms", [False, True])
@pytest.mark.parametrize("with_add", [True, False])
def test_add_norm_equals_the_xla_norm_in_value_and_gradients(rms, with_add):
    k = jax.random.split(jax.random.key(0), 5)
    shape, d = (3, 7), 48  # 21 rows: the last block padded; 48 columns: chunks of 16
    x = jax.random.normal(k[0], shape + (d,)) * 2 + 1
    h = jax.random.normal(k[1], shape + (d,)).astype(jnp.bfloat16) if with_add else None
    scale, bias = 1 + 0.1 * jax.random.normal(k[2], (d,)), 0.1 * jax.random.normal(k[3], (d,)) * (not rms)
    cotangent = jax.random.normal(k[4], shape + (d,))

    def objective(fn):
        def value(x, h, scale, bias):
            y, out = fn(x, h, scale, bias)
            return jnp.sum(y * cotangent) + jnp.sum(out.astype(jnp.float32) * cotangent ** 2)
        return value

    argnums = (0, 1, 2, 3) if with_add else (0, 2, 3)
    want, want_grads = jax.value_and_grad(objective(lambda *a: _reference(*a, rms)), argnums)(x, h, scale, bias)
    got, got_grads = jax.value_and_grad(objective(lambda *a: add_norm(*a, rms, 1e-6, jnp.bfloat16, True)),
                                        argnums)(x, h, scale, bias)
    np.testing.assert_allclose(got, want, rtol=1e-5)
    for a, b in zip(got_grads, want_grads):
        assert a.dtype == b.dtype
        np.testing.assert_allclose(np.asarray(a, np.float32), np.asarray(b, np.float32), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("family,norm,dropout", [("causal", "layernorm", 0.0), ("hybrid", "rmsnorm", 0.1)])
def test_a_model_with_fused_norms_trains_like_the_xla_one(family, norm, dropout):
    config = ModelConfig(family=family, vocab_size=40, d_model=32, num_layers=2, num_heads=2, d_ff=48, max_len=16,
                         norm=norm, dropout=dropout, dtype="bfloat16")
    xla, fused = build_model(config, "cpu"), build_model(dataclasses.replace(config, norm_kernel="pallas"), "cpu")
    assert fused.config.norm_kernel == "pallas_interpret"
    tokens = jax.random.randint(jax.random.key(1), (2, 16), 5, 40)
    params = nn.meta.unbox(xla.init(jax.random.key(0), tokens))
    fused_params = nn.meta.unbox(fused.init(jax.random.key(0), tokens))
    assert jax.tree.structure(params) == jax.tree.structure(fused_params)  # checkpoints interchange
    positions = jnp.broadcast_to(jnp.arange(16), (2, 16))
    batch = {"tokens": tokens, "segment_ids": jnp.ones_like(tokens), "positions": positions}
    settings = objectives.LossSettings(masking=objectives.MaskingConfig(4, 40, (0, 1, 2, 3, 4)), max_mask_rate=0.3,
                                       hybrid_causal_share=0.5, deterministic=dropout == 0.0)

    def grads(model):
        return jax.value_and_grad(lambda p: objectives.compute_loss(model, p, batch, jax.random.key(2), mask_rate=0.3,
                                                                    settings=settings)[0])(params)

    (want, want_grads), (got, got_grads) = grads(xla), grads(fused)
    np.testing.assert_allclose(got, want, rtol=2e-3)  # bf16 activations: rounding may differ at the last bit
    scale = max(float(jnp.abs(g).max()) for g in jax.tree.leaves(want_grads))
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, atol=2e-2 * scale), got_grads, want_grads)


def test_pallas_norms_are_refused_on_a_tpu():
    with pytest.raises(ValueError, match="norm_kernel='pallas'.*not on TPUs"):
        build_model(ModelConfig(norm_kernel="pallas"), "tpu")

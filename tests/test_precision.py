"""bf16 runs: the float32 residual stream, bf16 loss matmuls accumulating in float32, loss chunks
per backend, and a bf16 run of configs/base.py's model tracking the float32 run."""
import dataclasses

import flax.linen as nn
import jax
import jax.extend
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import tiny_config

from babylm_jax.config.schema import RunConfig
from babylm_jax.config.model import ModelConfig
from babylm_jax.model.loss import LOSS_CHUNK, cross_entropy, loss_chunk, projected_cross_entropy
from babylm_jax.model.transformer import Transformer
from babylm_jax.training import loop

SMALL = ModelConfig(vocab_size=40, d_model=32, num_layers=2, num_heads=2, d_ff=48, max_len=16, dtype="bfloat16")


@pytest.mark.parametrize("residual,expected", [("float32", jnp.float32), ("bfloat16", jnp.bfloat16)])
def test_bf16_blocks_keep_the_residual_stream_in_model_residual_dtype(residual, expected):
    model = Transformer(dataclasses.replace(SMALL, residual_dtype=residual))
    tokens = jnp.ones((2, 8), jnp.int32)
    params = nn.meta.unbox(model.init(jax.random.key(0), tokens))
    _, hidden_NxBxLxD = model.apply(params, tokens, return_hidden_states=True, method="encode")
    assert hidden_NxBxLxD[:-1].dtype == expected  # block inputs: embeddings and the stream between blocks


def _dots(fn, *args):
    """(operand dtypes, preferred dtype) of every dot_general in fn's jaxpr, nested ones included."""
    found = []

    def walk(jaxpr):
        for eqn in jaxpr.eqns:
            if eqn.primitive.name == "dot_general":
                found.append((tuple(str(v.aval.dtype) for v in eqn.invars), str(eqn.params["preferred_element_type"])))
            for sub in jax.extend.core.jaxprs_in_params(eqn.params):
                walk(sub)

    walk(jax.make_jaxpr(fn)(*args).jaxpr)
    return found


def test_bf16_loss_matmuls_take_bf16_and_accumulate_in_float32():
    rng = np.random.default_rng(0)
    x, embed = jnp.asarray(rng.standard_normal((40, 16)), jnp.float32), jnp.asarray(rng.standard_normal((50, 16)) * 0.3)
    targets, weights = jnp.asarray(rng.integers(0, 50, 40)), jnp.ones((40,))

    def loss(x, embed, dtype):
        return projected_cross_entropy(x, embed, targets, weights, 0.0, 16, 1, dtype)

    dots = _dots(jax.grad(lambda x, e: loss(x, e, jnp.bfloat16), (0, 1)), x, embed)
    assert len(dots) >= 3 and all(d == (("bfloat16", "bfloat16"), "float32") for d in dots), dots
    exact, _ = cross_entropy(x @ embed.T, targets, weights)
    np.testing.assert_allclose(loss(x, embed, jnp.bfloat16), exact, rtol=1e-2)
    np.testing.assert_allclose(loss(x, embed, jnp.float32), exact, rtol=1e-5)
    bf16_grads = jax.grad(lambda x, e: loss(x, e, jnp.bfloat16), (0, 1))(x, embed)
    f32_grads = jax.grad(lambda x, e: loss(x, e, jnp.float32), (0, 1))(x, embed)
    for a, b in zip(bf16_grads, f32_grads):
        assert a.dtype == jnp.float32
        np.testing.assert_allclose(a, b, atol=0.05 * float(jnp.max(jnp.abs(b))))


def test_loss_chunks_fit_each_backend():
    assert loss_chunk("cpu", 6000) == LOSS_CHUNK == 256
    assert loss_chunk("cuda", 16_384) == 4096  # 4096 x 16,384 f32 logits = 256 MB
    assert loss_chunk("tpu", 32_768) == 2048
    assert loss_chunk("cuda", 64) == 16_384 and loss_chunk("cuda", 10**6) == 1024
    assert loss_chunk("cuda", 16_384, configured=512) == 512


@pytest.mark.slow
def test_a_bf16_run_of_the_base_model_tracks_the_float32_run(tiny_corpus_dir, tmp_path):
    """configs/base.py's model (4 layers, d 128) for 150 steps on the fixture corpus: the bf16 run's
    eval loss is within 2% of the float32 run's (and both learnt: far below log(64))."""
    losses = {}
    for dtype in ("float32", "bfloat16"):
        config = tiny_config(tiny_corpus_dir)
        config.model.update(d_model=128, num_layers=4, num_heads=4, d_ff=384, dtype=dtype)
        config.train.update(num_steps=150, batch_size=8, seq_len=64, learning_rate=3e-3, warmup_steps=10,
                            log_every_steps=50, eval_every_steps=150, eval_batches=4, eval_tasks="")
        config.checkpoint.every_steps = 150
        losses[dtype] = loop.train_and_evaluate(RunConfig.from_config(config), str(tmp_path / dtype))["final_eval_loss"]
    assert losses["float32"] < 0.6 * np.log(64)
    assert abs(losses["bfloat16"] - losses["float32"]) <= 0.02 * losses["float32"], losses

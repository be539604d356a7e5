"""Attention backends are one table (`core.attention_backends`) and their kernels one table beside the
kernels (`model.attention.KERNELS`): every entry has its kernel, the config checks `model.attention`
against the table, and a fixture backend added by an entry in each (its kernel below) runs a model
exactly as "reference" does."""
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from babylm_jax.config.model import ModelConfig
from babylm_jax.core import attention_backends
from babylm_jax.core.attention_backends import AttentionBackend
from babylm_jax.model import attention
from babylm_jax.model.transformer import Transformer

CALLS = []  # shapes the fixture kernel was traced with


def dense_kernel(q_BxLxHxK, k_BxLxHxK, v_BxLxHxK, mask, interpret=False):
    """The fixture backend: masked softmax attention written plainly, autodiff for the gradient."""
    CALLS.append(q_BxLxHxK.shape)
    scores = jnp.einsum("blhk,bmhk->bhlm", q_BxLxHxK, k_BxLxHxK, preferred_element_type=jnp.float32)
    scores = jnp.where(mask.allowed_Bx1xLxL, scores * q_BxLxHxK.shape[-1] ** -0.5, -1e30)
    probs = jax.nn.softmax(scores, axis=-1).astype(v_BxLxHxK.dtype)
    return jnp.einsum("bhlm,bmhk->blhk", probs, v_BxLxHxK)


@pytest.fixture
def dense(monkeypatch):
    """The fixture backend "dense", registered on the CPU only: its entry and its kernel."""
    monkeypatch.setitem(attention_backends.ATTENTION_BACKENDS, "dense", AttentionBackend(platforms=("cpu",)))
    monkeypatch.setitem(attention.KERNELS, "dense", dense_kernel)
    CALLS.clear()


def test_every_entry_has_its_kernel_and_every_kernel_an_entry():
    assert list(attention.KERNELS) == list(attention_backends.ATTENTION_BACKENDS)
    for name in attention_backends.ATTENTION_BACKENDS:
        assert callable(attention.kernel(name)), name
    assert attention_backends.attention_kinds() == ("auto", "xla", "cudnn", "splash", "reference")


def test_the_config_takes_a_backend_only_once_it_is_in_the_table(dense, monkeypatch):
    ModelConfig.from_config({"attention": "dense"})
    monkeypatch.delitem(attention_backends.ATTENTION_BACKENDS, "dense")
    with pytest.raises(ValueError, match="config key model.attention: 'dense' is not one of auto, xla, cudnn"):
        ModelConfig.from_config({"attention": "dense"})


def test_the_table_decides_where_a_backend_runs(dense):
    assert attention.resolve("dense", "cpu", jnp.float32) == "dense"
    assert attention.resolve("auto", "cpu", jnp.float32) == "reference"  # no auto_on: auto never picks it
    with pytest.raises(ValueError, match=r"'dense' needs a platform of cpu.*platform is tpu "
                                         r"\(choices there: auto, xla, splash, reference\)"):
        attention.resolve("dense", "tpu", jnp.float32)


@pytest.mark.slow
def test_the_fixture_backend_runs_the_model_as_reference_does(dense):
    def model(kind):
        return Transformer(ModelConfig(family="hybrid", vocab_size=40, d_model=32, num_layers=2, num_heads=2,
                                       d_ff=48, max_len=16, attention=kind))

    tokens = jax.random.randint(jax.random.key(1), (3, 10), 0, 40)
    segments = jnp.asarray(np.where(np.arange(10) < 6, 1, 2)[None].repeat(3, 0))
    causal = jnp.asarray([True, False, True])  # the hybrid's mixed rows
    params = nn.meta.unbox(model("reference").init(jax.random.key(0), tokens))

    def loss(kind):
        return lambda p: jnp.mean(jnp.square(model(kind).apply(p, tokens, segments, None, causal)))

    ours, ref = (jax.value_and_grad(loss(kind))(params) for kind in ("dense", "reference"))
    assert CALLS  # the fixture kernel is what ran
    np.testing.assert_allclose(ours[0], ref[0], rtol=1e-5)
    for a, b in zip(jax.tree.leaves(ours[1]), jax.tree.leaves(ref[1])):
        np.testing.assert_allclose(a, b, atol=1e-6, rtol=1e-4)

"""Attention backends (`model.attention`): each path against a slow per-query loop, the model on
every CPU path, the choice per platform, and the cuDNN path lowered for CUDA without a GPU."""
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from babylm_jax.model import attention
from babylm_jax.config.model import ModelConfig
from babylm_jax.model.transformer import Transformer

B, L, H, K = 3, 10, 2, 8


def _inputs(dtype):
    rng = np.random.default_rng(0)
    q, k, v, probe = (jnp.asarray(rng.standard_normal((B, L, H, K)), dtype) for _ in range(4))
    segments = np.where(np.arange(L) < 6, 1, 2)[None].repeat(B, 0)
    segments[2, -3:] = 0  # a padding tail
    causal = np.array([True, False, True])  # the hybrid's mixed rows
    return q, k, v, probe, jnp.asarray(segments), causal


def _loop_attention(q, k, v, segments, causal):
    """The definition, one query at a time, in float64."""
    q, k, v = (np.asarray(x, np.float64) for x in (q, k, v))
    out = np.zeros_like(q)
    for b in range(B):
        for i in range(L):
            keys = [j for j in range(L) if segments[b, j] == segments[b, i] and (not causal[b] or j <= i)]
            for h in range(H):
                scores = np.array([q[b, i, h] @ k[b, j, h] for j in keys]) / np.sqrt(K)
                p = np.exp(scores - scores.max())
                out[b, i, h] = (p / p.sum()) @ v[b, keys, h]
    return out


def _dense(q, k, v, allowed):
    """Plain masked softmax attention in float32: the gradient reference."""
    scores = jnp.einsum("blhk,bmhk->bhlm", q.astype(jnp.float32), k.astype(jnp.float32)) / np.sqrt(K)
    probs = jax.nn.softmax(jnp.where(allowed, scores, -jnp.inf), axis=-1)
    return jnp.einsum("bhlm,bmhk->blhk", probs, v.astype(jnp.float32))


@pytest.mark.parametrize("kind", ["reference", "xla"])
@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
def test_cpu_paths_match_a_loop_over_queries_in_value_and_gradient(kind, dtype):
    q, k, v, probe, segments, causal = _inputs(dtype)
    mask = attention.Mask(attention.attention_mask(segments, jnp.asarray(causal)))
    tol = 1e-5 if dtype == jnp.float32 else 3e-2
    out = attention.attend(q, k, v, mask, kind)
    assert out.dtype == dtype
    np.testing.assert_allclose(np.asarray(out, np.float64), _loop_attention(q, k, v, segments, causal), atol=tol * 2)

    def loss(f):
        return lambda *qkv: jnp.sum(jnp.sin(f(*qkv).astype(jnp.float32)) * probe.astype(jnp.float32))

    ours = jax.grad(loss(lambda *qkv: attention.attend(*qkv, mask, kind)), (0, 1, 2))(q, k, v)
    ref = jax.grad(loss(lambda *qkv: _dense(*qkv, mask.allowed_Bx1xLxL)), (0, 1, 2))(q, k, v)
    for a, b in zip(ours, ref):
        np.testing.assert_allclose(np.asarray(a, np.float32), np.asarray(b, np.float32), atol=tol * 5, rtol=tol)


def _model(kind, family="hybrid", dtype="float32"):
    config = ModelConfig(family=family, vocab_size=40, d_model=32, num_layers=2, num_heads=2, d_ff=48,
                         max_len=16, attention=kind, dtype=dtype)
    return Transformer(config)


@pytest.mark.slow
def test_the_model_gives_the_same_logits_and_gradients_on_each_cpu_path():
    tokens = jax.random.randint(jax.random.key(1), (B, L), 0, 40)
    _, _, _, _, segments, causal = _inputs(jnp.float32)
    positions = jnp.broadcast_to(jnp.arange(L), (B, L))
    params = nn.meta.unbox(_model("reference").init(jax.random.key(0), tokens))

    def loss(kind):
        model = _model(kind)
        return lambda p: jnp.mean(jnp.square(model.apply(p, tokens, segments, positions, jnp.asarray(causal))))

    values = {kind: jax.value_and_grad(loss(kind))(params) for kind in ("reference", "xla", "auto")}
    for kind in ("xla", "auto"):
        np.testing.assert_allclose(values[kind][0], values["reference"][0], rtol=1e-5)
        for a, b in zip(jax.tree.leaves(values[kind][1]), jax.tree.leaves(values["reference"][1])):
            np.testing.assert_allclose(a, b, atol=1e-6, rtol=1e-4)


def test_auto_picks_cudnn_on_cuda_in_bf16_and_refuses_what_a_platform_cannot_run():
    assert attention.resolve("auto", "cuda", jnp.bfloat16) == "cudnn"
    assert attention.resolve("auto", "cuda", jnp.float32) == "xla"
    assert attention.resolve("auto", "cpu", jnp.bfloat16) == "reference"
    assert attention.resolve("auto", "tpu", jnp.bfloat16) == "splash"
    with pytest.raises(ValueError, match="model.attention='cudnn' needs a CUDA GPU.*platform is cpu"):
        attention.resolve("cudnn", "cpu", jnp.bfloat16)
    with pytest.raises(ValueError, match="needs model.dtype='bfloat16'"):
        attention.resolve("cudnn", "cuda", jnp.float32)
    with pytest.raises(ValueError, match="model.attention: 'flash' is not one of auto, xla, cudnn, splash, reference"):
        ModelConfig.from_config({"attention": "flash"})
    trained_on_gpu = ModelConfig(attention="cudnn", dtype="bfloat16")  # loaded on a CPU to evaluate: same numbers
    assert attention.for_platform(trained_on_gpu, "cpu", strict=False).attention == "reference"
    with pytest.raises(ValueError, match="needs a CUDA GPU"):
        attention.for_platform(trained_on_gpu, "cpu")


def _cuda_grad_text(kind, family):
    """The gradient of a bf16 model's loss, lowered for CUDA on this CPU host."""
    model = _model(kind, family, "bfloat16")
    tokens = jax.ShapeDtypeStruct((4, 16), jnp.int32)
    params = jax.eval_shape(lambda: nn.meta.unbox(model.init(jax.random.key(0), jnp.zeros((4, 16), jnp.int32))))
    causal = jnp.arange(4) < 1 if family == "hybrid" else None

    def grad(p, t):
        segments = jnp.where(jnp.arange(16) < 9, 1, 2)[None].repeat(4, 0)
        return jax.grad(lambda p: jnp.mean(model.apply(p, t, segments, None, causal)))(p)

    return jax.jit(grad).trace(params, tokens).lower(lowering_platforms=("cuda",)).as_text()


@pytest.mark.gpu
@pytest.mark.parametrize("family", ["causal", "hybrid"])
def test_cudnn_path_lowers_for_cuda_with_fused_attention_and_no_float32_scores(family):
    from jax._src.lib import cuda_versions

    if cuda_versions is None:
        pytest.skip("cuDNN's libraries are not installed here (pip install -e '.[cuda12]'): the CUDA lowering "
                    "of the cudnn path cannot be traced")
    cudnn = _cuda_grad_text("cudnn", family)
    xla = _cuda_grad_text("xla", family)
    scores = "tensor<4x2x16x16xf32>"  # [B, H, L, L] in float32
    assert "__cudnn$fmha" in cudnn and scores not in cudnn
    assert "__cudnn$fmha" not in xla and scores in xla


"""Splash attention (Pallas, interpret mode on the CPU) against a plain masked softmax."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from babylm_jax.model import attention
from babylm_jax.model import attention
from babylm_jax.model.attention import splash_attention
from babylm_jax.model.attention import splash_block_size as block_size

B, L, H, K = 4, 128, 2, 16


def plain_attention(q, k, v, segment_ids, causal_B):
    """softmax(q k^T / sqrt(K)) v over the allowed keys, in float32, one obvious einsum at a time."""
    allowed = attention.attention_mask(segment_ids, causal_B)  # [B, 1, L, L]
    scores = jnp.einsum("blhk,bmhk->bhlm", q, k) / np.sqrt(K)
    probs = jax.nn.softmax(jnp.where(allowed, scores, -jnp.inf), axis=-1)
    return jnp.einsum("bhlm,bmhk->blhk", probs, v)


def packed_inputs():
    q, k, v = (jax.random.normal(jax.random.key(i), (B, L, H, K)) for i in range(3))
    lengths = [(40, 60, 20), (128,), (70, 30), (10,)]  # documents per row; the rest is padding (segment 0)
    segment_ids = np.zeros((B, L), np.int32)
    for row, docs in enumerate(lengths):
        start = 0
        for doc, n in enumerate(docs, start=1):
            segment_ids[row, start:start + n] = doc
            start += n
    return q, k, v, jnp.asarray(segment_ids)


@pytest.mark.slow
@pytest.mark.parametrize("rows,causal", [("causal", [1, 1, 1, 1]), ("bidirectional", [0, 0, 0, 0]),
                                         ("mixed", [1, 0, 0, 1])])
def test_splash_matches_the_plain_masked_softmax_and_its_gradient(rows, causal):
    q, k, v, segment_ids = packed_inputs()
    causal_B = jnp.asarray(causal, bool)
    splash = lambda q, k, v: splash_attention(q, k, v, segment_ids, rows, causal_B, interpret=True)
    plain = lambda q, k, v: plain_attention(q, k, v, segment_ids, causal_B)
    np.testing.assert_allclose(splash(q, k, v), plain(q, k, v), atol=2e-5)
    cotangent = jax.random.normal(jax.random.key(7), q.shape)
    loss = lambda f: lambda *qkv: jnp.sum(f(*qkv) * cotangent)
    for got, want in zip(jax.grad(loss(splash), argnums=(0, 1, 2))(q, k, v),
                         jax.grad(loss(plain), argnums=(0, 1, 2))(q, k, v)):
        np.testing.assert_allclose(got, want, atol=5e-5)


@pytest.mark.parametrize("explicit", [False, True])
def test_splash_under_a_mesh_splits_the_batch_and_gives_the_same_numbers(explicit):
    q, k, v, segment_ids = packed_inputs()
    devices = np.asarray(jax.devices()[:4]).reshape(2, 2)
    kind = jax.sharding.AxisType.Explicit if explicit else jax.sharding.AxisType.Auto
    mesh = jax.sharding.Mesh(devices, ("data", "fsdp"), axis_types=(kind, kind))  # Auto: as training.sharding
    expected = plain_attention(q, k, v, segment_ids, jnp.ones(B, bool))
    with jax.set_mesh(mesh):
        rows = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec(("data", "fsdp")))
        sharded = [jax.device_put(x, rows) for x in (q, k, v, segment_ids)]
        got = jax.jit(lambda q, k, v, s: splash_attention(q, k, v, s, "causal", interpret=True))(*sharded)
    np.testing.assert_allclose(got, expected, atol=2e-5)


def test_a_kernel_first_built_inside_jit_serves_later_calls():
    """The kernel is cached by shape: built in a jit trace (a train step), it holds no tracer of that trace
    that a later call (the eval step, or here an eager call) would meet as a leaked tracer."""
    q, k, v, segment_ids = packed_inputs()
    attention._splash_kernel_for.cache_clear()  # whichever test ran first, this one builds the kernel under jit
    jitted = jax.jit(lambda q, k, v, s: splash_attention(q, k, v, s, "causal", interpret=True))(q, k, v, segment_ids)
    np.testing.assert_allclose(splash_attention(q, k, v, segment_ids, "causal", interpret=True), jitted, atol=1e-6)


def test_block_sizes_and_bad_lengths():
    assert [block_size(n) for n in (128, 256, 384, 512, 1024, 1536)] == [128, 256, 384, 512, 512, 512]
    with pytest.raises(ValueError, match="multiple of 128.*model.attention='xla'"):
        block_size(96)
    with pytest.raises(ValueError, match="rows='diagonal'"):
        q, k, v, s = packed_inputs()
        splash_attention(q, k, v, s, "diagonal")


@pytest.mark.parametrize("causal", [True, False, jnp.asarray([1, 0, 0, 1], bool)])
def test_attend_dispatches_splash_from_the_models_mask(causal):
    q, k, v, segment_ids = packed_inputs()
    mask = attention.Mask.of(segment_ids, causal)
    assert mask.rows == ("causal" if causal is True else "bidirectional" if causal is False else "mixed")
    got = attention.attend(q, k, v, mask, "splash", interpret=True)
    np.testing.assert_allclose(got, plain_attention(q, k, v, segment_ids, mask.causal_B), atol=2e-5)
    short = attention.Mask.of(segment_ids[:, :64], causal)  # not a multiple of 128: XLA's attention
    got = attention.attend(q[:, :64], k[:, :64], v[:, :64], short, "splash")
    np.testing.assert_allclose(got, plain_attention(q[:, :64], k[:, :64], v[:, :64], segment_ids[:, :64],
                                                    short.causal_B), atol=2e-5)


def test_splash_is_auto_on_tpu_and_refused_elsewhere():
    assert attention.resolve("auto", "tpu", jnp.bfloat16) == "splash"
    assert attention.resolve("splash", "tpu", jnp.float32) == "splash"
    with pytest.raises(ValueError, match="model.attention='splash' needs a TPU.*platform is cpu"):
        attention.resolve("splash", "cpu", jnp.float32)


@pytest.mark.parametrize("causal", [True, False])
def test_the_kernel_holds_the_tables_of_make_splash_mha_as_numpy_arrays(causal):
    """The kernel is the library's `make_splash_mha` (run eagerly here, where it can) with its tables left on the
    host: numpy arrays, constants in any trace and for any device, equal to the library's own."""
    from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_kernel as kernel_lib
    from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_mask as mask_lib

    ours = attention._splash_kernel_for(causal, H, 256, True)
    block = block_size(256)
    head = mask_lib.CausalMask((256, 256)) if causal else mask_lib.FullMask((256, 256))
    blocks = kernel_lib.BlockSizes(**{f: block for f in ("block_q", "block_kv", "block_kv_compute", "block_q_dkv",
                                                         "block_kv_dkv", "block_kv_dkv_compute", "block_q_dq",
                                                         "block_kv_dq")})
    library = kernel_lib.make_splash_mha(mask_lib.MultiHeadMask([head] * H), block_sizes=blocks, head_shards=1,
                                         q_seq_shards=1, interpret=True)
    settings = lambda kernel: {k: v for k, v in kernel.kwargs.items() if k != "mask_function"}  # a closure per mask
    assert settings(ours) == settings(library)
    assert (ours.kwargs["mask_function"] is None) == (library.kwargs["mask_function"] is None) == (not causal)
    ours_leaves, library_leaves = jax.tree.leaves(ours), jax.tree.leaves(library)
    assert len(ours_leaves) == len(library_leaves) and all(isinstance(leaf, np.ndarray) for leaf in ours_leaves)
    for got, want in zip(ours_leaves, library_leaves):
        np.testing.assert_array_equal(got, want)

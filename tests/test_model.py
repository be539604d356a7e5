"""The Transformer stack: causality, segment isolation, scan == loop, and the objectives."""
import dataclasses

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from babylm_jax.model import attention, layers, objectives
from babylm_jax.model.loss import cross_entropy, projected_cross_entropy
from babylm_jax.config.model import ModelConfig
from babylm_jax.model.transformer import Transformer
from fixtures.layer_params import stack_layer_params, unstack_layer_params

V, L = 50, 12
SPECIAL = (0, 1, 2, 3, 4, 5, 6)
MASKING = objectives.MaskingConfig(mask_id=4, vocab_size=V, special_ids=SPECIAL)


def make(family="causal", **overrides):
    config = ModelConfig(family=family, vocab_size=V, d_model=32, num_layers=2, num_heads=4, d_ff=48, **overrides)
    model = Transformer(config)
    tokens = jax.random.randint(jax.random.key(1), (2, L), 7, V)
    params = nn.meta.unbox(model.init(jax.random.key(0), tokens))
    return model, params, tokens


def test_causal_logits_do_not_see_the_future():
    model, params, tokens = make("causal")
    changed = tokens.at[:, 6:].set((tokens[:, 6:] + 3) % V)
    a, b = model.apply(params, tokens), model.apply(params, changed)
    np.testing.assert_allclose(a[:, :6], b[:, :6], atol=1e-6)
    assert np.abs(a[:, 6:] - b[:, 6:]).max() > 1e-3


@pytest.mark.parametrize("family", ["causal", "mlm"])
def test_packed_documents_do_not_see_each_other(family):
    model, params, tokens = make(family)
    segments = jnp.array([[1] * 5 + [2] * 4 + [0] * 3] * 2)
    positions = jnp.array([list(range(5)) + list(range(4)) + [0] * 3] * 2)
    changed = tokens.at[:, 5:9].set((tokens[:, 5:9] + 3) % V)  # edit document 2 only
    a = model.apply(params, tokens, segments, positions)
    b = model.apply(params, changed, segments, positions)
    np.testing.assert_allclose(a[:, :5], b[:, :5], atol=1e-6)
    # Document 2 alone in its own row gives the same logits as packed behind document 1.
    alone = model.apply(params, tokens[:, 5:9], jnp.ones((2, 4), jnp.int32), positions[:, 5:9])
    np.testing.assert_allclose(a[:, 5:9], alone, atol=1e-5)


def test_encoder_sees_both_directions():
    model, params, tokens = make("mlm")
    changed = tokens.at[:, -1].set((tokens[:, -1] + 3) % V)
    assert np.abs(model.apply(params, tokens)[:, 0] - model.apply(params, changed)[:, 0]).max() > 1e-4


def test_rope_table_rotates_by_position_times_frequency():
    positions = jnp.array([[0, 1, 7, 63]])
    sin, cos = layers.rope_angles(positions, head_dim=8, theta=100.0, max_len=64)
    angles = np.array([0, 1, 7, 63])[:, None] * 100.0 ** (-np.arange(0, 8, 2) / 8)
    np.testing.assert_allclose(sin[0, :, 0], np.sin(angles), atol=1e-5)
    np.testing.assert_allclose(cos[0, :, 0], np.cos(angles), atol=1e-5)
    # Rotating a vector preserves its norm; position 0 leaves it unchanged.
    x = jax.random.normal(jax.random.key(0), (1, 4, 1, 8))
    rotated = layers.rotary_embedding(x, (sin, cos))
    np.testing.assert_allclose(jnp.linalg.norm(rotated, axis=-1), jnp.linalg.norm(x, axis=-1), rtol=1e-5)
    np.testing.assert_allclose(rotated[:, 0], x[:, 0], atol=1e-6)



@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
def test_attention_equals_jax_attention_in_value_and_gradients(dtype):
    """The written-out attention gradient against autodiff of jax.nn.dot_product_attention:
    causal and bidirectional rows, two documents, and a padding tail (segment 0)."""
    rng = np.random.default_rng(0)
    q, k, v, probe = (jnp.asarray(rng.standard_normal((3, 16, 2, 8)), dtype) for _ in range(4))
    segments = jnp.asarray(np.where(np.arange(16) < 9, 1, 2)[None].repeat(3, 0)).at[2, -3:].set(0)
    mask = attention.attention_mask(segments, jnp.array([True, False, True]))

    def loss(attention):
        return lambda q, k, v: jnp.sum(jnp.sin(attention(q, k, v).astype(jnp.float32)) * probe.astype(jnp.float32))

    ours = loss(lambda q, k, v: attention.reference_attention(q, k, v, mask))
    reference = loss(lambda q, k, v: jax.nn.dot_product_attention(q, k, v, mask=mask, implementation="xla"))
    tol = 1e-5 if dtype == jnp.float32 else 2e-2
    np.testing.assert_allclose(ours(q, k, v), reference(q, k, v), rtol=tol)
    for a, b in zip(jax.grad(ours, (0, 1, 2))(q, k, v), jax.grad(reference, (0, 1, 2))(q, k, v)):
        assert a.dtype == dtype
        np.testing.assert_allclose(np.asarray(a, np.float32), np.asarray(b, np.float32), atol=tol * 5, rtol=tol)


def test_swiglu_equals_autodiff_of_silu_times_up():
    rng = np.random.default_rng(1)
    gate, up, probe = (jnp.asarray(rng.standard_normal((2, 5, 7)) * 4, jnp.float32) for _ in range(3))
    ours = lambda g, u: jnp.sum(jnp.cos(layers.swiglu(g, u)) * probe)  # noqa: E731
    reference = lambda g, u: jnp.sum(jnp.cos(jax.nn.silu(g) * u) * probe)  # noqa: E731
    np.testing.assert_allclose(ours(gate, up), reference(gate, up), rtol=1e-6)
    for a, b in zip(jax.grad(ours, (0, 1))(gate, up), jax.grad(reference, (0, 1))(gate, up)):
        np.testing.assert_allclose(a, b, atol=1e-5, rtol=1e-5)

def test_rows_longer_than_max_len_are_refused():
    model, params, _ = make("causal", max_len=L)
    with pytest.raises(ValueError, match=f"longer than model.max_len={L}"):
        model.apply(params, jnp.ones((1, L + 1), jnp.int32))


@pytest.mark.parametrize("family", ["causal", "hybrid"])
def test_scan_and_loop_stacks_agree(family):
    model, params, tokens = make(family)
    scanned = Transformer(dataclasses.replace(model.config, scan_layers=True, remat="full"))
    scan_params = stack_layer_params(params, 2)
    np.testing.assert_allclose(model.apply(params, tokens), scanned.apply(scan_params, tokens), atol=1e-5)
    _, hidden_loop = model.apply(params, tokens, return_hidden_states=True, method=Transformer.encode)
    _, hidden_scan = scanned.apply(scan_params, tokens, return_hidden_states=True, method=Transformer.encode)
    assert hidden_loop.shape == (3, 2, L, 32)
    np.testing.assert_allclose(hidden_loop, hidden_scan, atol=1e-5)
    back = unstack_layer_params(scan_params, 2)
    assert jax.tree.all(jax.tree.map(lambda x, y: bool(jnp.array_equal(x, y)), back, params))


def _batch(tokens):
    b, length = tokens.shape
    return {
        "tokens": tokens,
        "segment_ids": jnp.ones((b, length), jnp.int32),
        "positions": jnp.broadcast_to(jnp.arange(length), (b, length)),
    }


def _reference_ce(logits, targets, weights):
    """Slow reference: a Python loop over weighted positions."""
    logp = np.asarray(jax.nn.log_softmax(logits, axis=-1))
    terms = [-logp[b, t, targets[b, t]] for b in range(targets.shape[0]) for t in range(targets.shape[1]) if weights[b, t]]
    return float(np.mean(terms)), len(terms)


def test_causal_loss_predicts_the_next_token():
    model, params, tokens = make("causal")
    loss, aux = objectives.compute_loss(model, params, _batch(tokens), jax.random.key(3))
    logits = np.asarray(model.apply(params, tokens))
    targets = np.pad(np.asarray(tokens)[:, 1:], ((0, 0), (0, 1)))
    weights = np.ones_like(targets, bool)
    weights[:, -1] = False
    expected, count = _reference_ce(logits, targets, weights)
    assert float(aux["predicted_tokens"]) == count == 2 * (L - 1)
    assert float(loss) == pytest.approx(expected, rel=1e-5)


def _masked_inputs(rng, batch, rate):
    mask_rng, corrupt_rng, _ = jax.random.split(rng, 3)
    masked = objectives.choose_masked_positions(mask_rng, batch, rate, MASKING)
    return masked, objectives.corrupt(corrupt_rng, batch["tokens"], masked, MASKING)


def test_mlm_loss_counts_only_masked_positions():
    model, params, tokens = make("mlm")
    batch, rng = _batch(tokens), jax.random.key(4)
    loss, aux = objectives.compute_loss(model, params, batch, rng, mask_rate=0.4,
                                        settings=objectives.LossSettings(masking=MASKING))
    masked, inputs = _masked_inputs(rng, batch, 0.4)
    assert 0 < int(masked.sum()) < tokens.size
    logits = np.asarray(model.apply(params, inputs))
    expected, count = _reference_ce(logits, np.asarray(tokens), np.asarray(masked))
    assert float(aux["predicted_tokens"]) == count
    assert float(loss) == pytest.approx(expected, rel=1e-5)


def test_mntp_targets_are_shifted_by_exactly_one():
    model, params, tokens = make("hybrid")
    batch, rng = _batch(tokens), jax.random.key(5)
    settings = objectives.LossSettings(masking=MASKING, hybrid_causal_share=0.5)  # row 0 of 2 is causal
    loss, aux = objectives.compute_loss(model, params, batch, rng, mask_rate=0.4, settings=settings)
    masked, inputs = _masked_inputs(rng, batch, 0.4)
    masked = np.asarray(masked).copy()
    masked[0] = False  # row 0 is a causal row: unmasked input, next-token targets
    inputs = np.asarray(inputs).copy()
    inputs[0] = np.asarray(tokens[0])
    logits = np.asarray(model.apply(params, jnp.asarray(inputs), causal=jnp.array([True, False])))
    targets = np.pad(np.asarray(tokens)[:, 1:], ((0, 0), (0, 1)))
    weights = np.zeros_like(masked)
    weights[0, :-1] = True
    weights[1, :-1] = masked[1, 1:]  # the masked token at i is predicted at i - 1
    expected, count = _reference_ce(logits, targets, weights)
    assert float(aux["predicted_tokens"]) == count
    assert float(loss) == pytest.approx(expected, rel=1e-5)


@pytest.mark.parametrize("z_loss", [0.0, 1e-3])
def test_projected_cross_entropy_equals_full_logits_in_value_and_gradients(z_loss):
    k = jax.random.split(jax.random.key(11), 4)
    x, embed = jax.random.normal(k[0], (100, 16)), jax.random.normal(k[1], (V, 16))
    targets = jax.random.randint(k[2], (100,), 0, V)
    weights = (jax.random.uniform(k[3], (100,)) < 0.6).astype(jnp.float32)

    def full(x, embed):
        return cross_entropy((x @ embed.T)[None], targets[None], weights[None], z_loss)[0]

    def chunked(x, embed, groups):  # 4 chunks of 32 rows, 28 of them padding; or 4 blocks of 25 rows, one chunk of 32 each
        return projected_cross_entropy(x, embed, targets, weights, z_loss, 32, groups)

    for groups in (1, 4):
        assert float(jax.jit(chunked, static_argnums=2)(x, embed, groups)) == pytest.approx(float(full(x, embed)), rel=1e-5)
        grads = jax.jit(jax.grad(chunked, (0, 1)), static_argnums=2)(x, embed, groups)
        for got, want in zip(grads, jax.grad(full, (0, 1))(x, embed)):
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def _full_logits_loss(model, params, batch, rng, mask_rate, causal_rows, z_loss):
    """The obvious definition: corrupt as compute_loss does, logits at every position, mean loss."""
    tokens, segment_ids = batch["tokens"], batch["segment_ids"]
    mask_rng, corrupt_rng, _ = jax.random.split(rng, 3)
    masked = objectives.choose_masked_positions(mask_rng, batch, mask_rate, MASKING)
    causal = jnp.arange(tokens.shape[0]) < causal_rows
    if model.config.family == "mlm":
        targets, weights = tokens, masked
    else:
        masked = masked & ~causal[:, None]
        targets, weights = objectives.mntp_targets(tokens, masked, segment_ids)
        clm_targets, clm_weights = objectives.next_token_targets(tokens, segment_ids)
        targets = jnp.where(causal[:, None], clm_targets, targets)
        weights = jnp.where(causal[:, None], clm_weights, weights)
    inputs = objectives.corrupt(corrupt_rng, tokens, masked, MASKING)
    logits = model.apply(params, inputs, segment_ids, batch["positions"], causal)
    loss_sum, count = cross_entropy(logits, targets, weights, z_loss)
    return loss_sum / count


@pytest.mark.slow
@pytest.mark.parametrize("family,max_mask_rate,row_groups", [("hybrid", None, 1), ("mlm", 0.01, 1), ("mlm", None, 4)])
def test_masked_only_projection_equals_full_logits_in_loss_and_gradients(family, max_mask_rate, row_groups):
    """A hybrid batch (2 causal rows in 8) gathers its predicted positions into 128 slots (chunks
    of 32); an mlm batch split over 4 devices gathers each block of 2 rows into 32 slots; with
    max_mask_rate 0.01 an mlm batch overflows its 16 slots and takes every position."""
    model, params, _ = make(family)
    tokens = jax.random.randint(jax.random.key(12), (8, 32), 7, V)
    batch, rng, causal_rows = _batch(tokens), jax.random.key(13), 2 if family == "hybrid" else 0

    def gathered(p):
        settings = objectives.LossSettings(masking=MASKING, hybrid_causal_share=causal_rows / 8,
                                           max_mask_rate=max_mask_rate, z_loss=1e-3, chunk=32, row_groups=row_groups)
        return objectives.compute_loss(model, p, batch, rng, mask_rate=0.15, settings=settings)

    def full(p):
        return _full_logits_loss(model, p, batch, rng, 0.15, causal_rows, 1e-3)

    (loss, aux), grads = jax.jit(jax.value_and_grad(gathered, has_aux=True))(params)
    if row_groups == 1:
        capacity = objectives.prediction_capacity(256, causal_rows * 32, max_mask_rate or 0.15, False, 8)
        assert (capacity < float(aux["predicted_tokens"])) == (max_mask_rate is not None)
    else:
        masked, _ = _masked_inputs(rng, batch, 0.15)
        per_block = np.asarray(masked).reshape(row_groups, -1).sum(axis=1)
        assert objectives.prediction_capacity(64, 0, 0.15, False, 8) == 32 and per_block.max() <= 32
    assert causal_rows * 32 < float(aux["predicted_tokens"]) < 256
    assert float(loss) == pytest.approx(float(full(params)), rel=1e-5)
    for got, want in zip(jax.tree.leaves(grads), jax.tree.leaves(jax.grad(full)(params))):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-6)


def test_masking_rate_and_whole_words():
    tokens = jax.random.randint(jax.random.key(6), (64, 64), 7, V)
    batch = _batch(tokens)
    masked = objectives.choose_masked_positions(jax.random.key(7), batch, 0.3, MASKING)
    assert float(masked.mean()) == pytest.approx(0.3, abs=0.02)
    word_starts = (jax.random.uniform(jax.random.key(8), tokens.shape) < 0.4).astype(jnp.int32).at[:, 0].set(1)
    whole = dataclasses.replace(MASKING, whole_word=True)
    masked = np.asarray(objectives.choose_masked_positions(jax.random.key(9), {**batch, "word_starts": word_starts}, 0.3, whole))
    word_id = np.cumsum(np.asarray(word_starts), axis=1)
    for row in range(64):
        for w in np.unique(word_id[row]):
            assert len(set(masked[row][word_id[row] == w])) == 1  # a word is masked whole or not at all
    assert masked.mean() == pytest.approx(0.3, abs=0.04)
    corrupted = np.asarray(objectives.corrupt(jax.random.key(10), tokens, jnp.asarray(masked), MASKING))
    changed = corrupted[masked]
    assert (changed == 4).mean() == pytest.approx(0.8, abs=0.05)
    np.testing.assert_array_equal(corrupted[~masked], np.asarray(tokens)[~masked])


def test_the_export_states_the_norm_epsilon_of_both_norms():
    from babylm_jax.hf import hf_config

    assert layers.RMSNorm.eps == layers.LayerNorm.eps == hf_config.NORM_EPS


def test_model_defaults_are_the_default_config_and_bad_keys_are_named():
    import configs.base

    from babylm_jax.config.schema import default_config

    assert ModelConfig() == ModelConfig.from_config(default_config().model)
    base = ModelConfig.from_config(configs.base.get_config().model)
    assert base == dataclasses.replace(ModelConfig(), vocab_size=8000)  # base.py sets only the vocabulary
    with pytest.raises(ValueError, match=r"unknown config key\(s\) model.d_modle"):
        ModelConfig.from_config({"d_modle": 64})
    with pytest.raises(ValueError, match=r"config key model.num_layers: 2.0 is not of type int"):
        ModelConfig.from_config({"num_layers": 2.0})
    with pytest.raises(ValueError, match=r"config key model.norm: 'batchnorm' is not one of"):
        ModelConfig.from_config({"norm": "batchnorm"})


def test_one_hot_embedding_gradient_equals_the_scatter_add(monkeypatch):
    """model.embedding_grad="one_hot": the same lookup, and a gradient equal to the scatter-add's
    (bf16 high + low parts: ~16 bits of mantissa) over several chunks with a padded last one."""
    monkeypatch.setattr(layers, "ONE_HOT_CHUNK_BYTES", 2 * 50 * 24)  # chunks of 24 rows: 100 rows = 5 chunks
    keys = jax.random.split(jax.random.key(0), 3)
    embedding = jax.random.normal(keys[0], (50, 16))
    tokens = jax.random.randint(keys[1], (4, 25), 0, 50).at[0, :10].set(7)  # a token repeated ten times
    upstream = jax.random.normal(keys[2], (4, 25, 16))

    def pulled(gradient):
        out, vjp = jax.vjp(lambda e: layers.embed_tokens(e, tokens, gradient), embedding)
        return out, vjp(upstream)[0]

    (out_s, grad_s), (out_o, grad_o) = pulled("scatter"), pulled("one_hot")
    np.testing.assert_array_equal(out_o, out_s)
    slow = np.zeros((50, 16), np.float32)  # the obvious reference: a loop over tokens
    for token, row in zip(np.asarray(tokens).reshape(-1), np.asarray(upstream).reshape(-1, 16)):
        slow[token] += row
    np.testing.assert_allclose(grad_s, slow, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(grad_o, slow, rtol=1e-4, atol=1e-4)

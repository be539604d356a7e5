"""Scoring kernels against the slow, obvious reference (one sentence/masked copy at a time)."""
import flax.linen as nn
import jax
import numpy as np
import pytest

from babylm_jax.core.families import Scoring, family_spec
from babylm_jax.core.vocab import BOS_ID as BOS, CLS_ID as CLS, MASK_ID as MASK, SEP_ID as SEP
from babylm_jax.eval.zero_shot import scoring, unit_packing
from babylm_jax.config.model import ModelConfig
from babylm_jax.model.transformer import Transformer


def _model(family: str) -> tuple[Transformer, dict]:
    """A random model; params drawn with numpy from the abstract init (no init compile)."""
    config = ModelConfig(family=family, vocab_size=40, d_model=32, num_layers=1, num_heads=2, d_ff=64, max_len=64)
    model = Transformer(config)
    shapes = jax.eval_shape(model.init, jax.random.key(1), np.zeros((1, 8), np.int32))
    rng = np.random.default_rng(1)
    params = jax.tree.map(lambda x: (0.3 * rng.standard_normal(x.shape)).astype(np.float32), nn.meta.unbox(shapes))
    return model, params


def _sentences(family: str, lengths, seed: int = 0) -> list[list[int]]:
    rng = np.random.default_rng(seed)
    return [family_spec(family).framing.scoring_input(rng.integers(7, 40, size=n).tolist()) for n in lengths]


# Rows of 16 tokens: several short sentences per row, an empty one; causal adds one longer than a row.
LENGTHS = [3, 5, 0, 3, 7, 5, 1, 3]


@pytest.mark.parametrize("family", ["causal", "mlm", "hybrid"])
def test_kernel_equals_reference(family):
    model, params = _model(family)
    variant = family_spec(family).scoring
    lengths = LENGTHS + [20] if family == "causal" else LENGTHS
    sentences = _sentences(family, lengths)
    scorer = scoring.SentenceScorer(model, params, variant, MASK, batch_size=8, row_len=16)
    fast = scorer.score(sentences)
    slow = scoring.reference_scores(model, params, sentences, variant, MASK)
    np.testing.assert_allclose(fast, slow, rtol=0, atol=1e-4)
    assert fast[2] == 0.0 and all(s < 0 for i, s in enumerate(fast) if lengths[i] > 0)
    compiles = scorer.num_compiles
    assert compiles <= 2  # causal: the row shape and one long-row bucket
    # Other sentences falling in the same buckets compile nothing new.
    scorer.score(_sentences(family, [4, 2, 6, 3, 5] * 4 + ([18] if family == "causal" else []), seed=1))
    assert scorer.num_compiles == compiles
    if family == "mlm":
        _check_within_word_l2r(model, params, scorer)


def _check_within_word_l2r(model, params, scorer):
    sentences = _sentences("mlm", [4, 6, 3])
    word_ids = [[0, 0, 1, 1], [0, 1, 1, 1, 2, 3], [0, 1, 2]]
    fast = scorer.score(sentences, word_ids)
    slow = scoring.reference_scores(model, params, sentences, Scoring.PLL, MASK, word_ids)
    np.testing.assert_allclose(fast, slow, rtol=0, atol=1e-4)
    # One-token words: identical to plain PLL; multi-token words: different.
    plain = scorer.score(sentences)
    assert abs(fast[2] - plain[2]) < 1e-5 and abs(fast[0] - plain[0]) > 1e-4


def test_masked_copy_masks_later_tokens_of_the_same_word():
    tokens = [CLS, 10, 11, 12, 13, SEP]
    assert scoring.masked_copy(tokens, 2, MASK, None) == [CLS, 10, MASK, 12, 13, SEP]
    # words: (10 11 12) (13): masking 11 also masks 12, never the earlier 10.
    assert scoring.masked_copy(tokens, 2, MASK, [0, 0, 0, 1]) == [CLS, 10, MASK, MASK, 13, SEP]


@pytest.mark.parametrize("family,variant", [("causal", Scoring.CAUSAL), ("mlm", Scoring.PLL)])
def test_packing_places_every_unit_once(family, variant):
    sentences = _sentences(family, [3, 5, 0, 3, 7, 5, 1, 3, 20])
    groups = unit_packing.make_units(sentences, variant, MASK)
    rows = unit_packing.pack_units(groups, len(sentences), row_len=16, max_len=64, causal_reads=variant is Scoring.CAUSAL)
    unit_tokens = sum(len(g.arrays()[0]) * m for m, g in groups.items())
    assert sum(r.real_tokens for r in rows) == unit_tokens
    reads = np.concatenate([r.read_sentence.ravel() for r in rows])
    expected = [len(s) - 1 if variant is Scoring.CAUSAL else len(s) - 2 for s in sentences]
    counts = np.bincount(reads, minlength=len(sentences) + 1)[: len(sentences)]
    np.testing.assert_array_equal(counts, np.maximum(expected, 0))
    assert len({r.tokens.shape[1] for r in rows}) <= 2  # the row length plus one long bucket


def test_too_long_sentence_is_a_clear_error():
    model, params = _model("causal")
    scorer = scoring.SentenceScorer(model, params, Scoring.CAUSAL, MASK, batch_size=8, row_len=16)
    with pytest.raises(ValueError, match="max_len=64"):
        scorer.score([[BOS] + [9] * 80])


def test_batch_sizes_cover_rows_with_little_padding():
    assert unit_packing.batch_sizes(81, 64, 1) == [64, 32]
    assert unit_packing.batch_sizes(128, 64, 8) == [64, 64]
    assert unit_packing.batch_sizes(3, 64, 8) == [8]
    assert unit_packing.batch_sizes(70, 60, 8) == [64, 8]


def test_chunked_projection_equals_full_logits():
    """Reads projected a few at a time (with a padded last chunk) equal one full log-softmax."""
    model, params = _model("causal")
    rng = np.random.default_rng(3)
    tokens = rng.integers(7, 40, size=(3, 8)).astype(np.int32)
    batch = {
        "tokens": tokens,
        "segment_ids": np.ones_like(tokens),
        "positions": np.broadcast_to(np.arange(8, dtype=np.int32), tokens.shape),
        "read_pos": rng.integers(0, 8, size=(3, 5)).astype(np.int32),
        "read_target": rng.integers(0, 40, size=(3, 5)).astype(np.int32),
    }
    chunked = scoring.read_logprobs(model, params, batch, causal=True, chunk=4)  # 15 reads: 4 chunks
    log_probs_BxLxV = jax.nn.log_softmax(model.apply(params, tokens), axis=-1)
    rows = np.arange(3)[:, None]
    expected = log_probs_BxLxV[rows, batch["read_pos"], batch["read_target"]]
    np.testing.assert_allclose(chunked, expected, rtol=0, atol=1e-5)

"""One framing per family: training documents, scoring, fMRI rows, fine-tuning rows and the export agree."""
import types

import numpy as np
import pytest
from conftest import tiny_config

from babylm_jax.config.schema import RunConfig
from babylm_jax.corpus import preparation
from babylm_jax.core.families import family_spec
from babylm_jax.core.vocab import BOS_ID, CLS_ID, EOS_ID, SEP_ID
from babylm_jax.eval.finetune import clue
from babylm_jax.eval.fmri import features
from babylm_jax.eval.zero_shot import minimal_pairs

FAMILIES = ("causal", "mlm", "hybrid")


@pytest.fixture(scope="module")
def prepared(tiny_corpus_dir, tmp_path_factory):
    """family -> the prepared corpus (one workdir: the count and tokenizer are shared, the token caches not)."""
    workdir = tmp_path_factory.mktemp("framing")
    return {family: preparation.prepare_corpus(RunConfig.from_config(tiny_config(tiny_corpus_dir, family)), workdir) for family in FAMILIES}


def _spy_scorer(family: str, seen: list) -> types.SimpleNamespace:
    def score(inputs, word_ids=None, progress=None):
        seen.extend(inputs)
        return np.zeros(len(inputs))

    variant = family_spec(family).scoring
    config = types.SimpleNamespace(family=family, max_len=64)
    return types.SimpleNamespace(variant=variant, model=types.SimpleNamespace(config=config), score=score)


@pytest.mark.parametrize("family", FAMILIES)
def test_evaluation_inputs_are_framed_as_training_documents(family, prepared, monkeypatch):
    tokens, tokenizer = prepared[family].tokens, prepared[family].tokenizer
    starts, ends = tokens.doc_offsets[:-1], tokens.doc_offsets[1:] - 1
    opener, closer = int(tokens.tokens[starts[0]]), int(tokens.tokens[ends[0]])
    assert (opener, closer) == ((BOS_ID, EOS_ID) if family == "causal" else (CLS_ID, SEP_ID))
    assert np.all(tokens.tokens[starts] == opener) and np.all(tokens.tokens[ends] == closer)

    # Minimal-pair scoring: the same opener; masked families also the same closer.
    seen: list = []
    pair = minimal_pairs.Pair("我们吃饭。", "我们饭吃。", "uid", "phenomenon")
    minimal_pairs.score_pairs(_spy_scorer(family, seen), tokenizer, [pair])
    good = tokenizer.encode(pair.good)
    assert seen[0] == ([opener, *good] if family == "causal" else [opener, *good, closer])

    # A fine-tuning pair: opener, each segment closed by the closer.
    a, b = tokenizer.encode("今天下雨"), tokenizer.encode("我们在家")
    row, truncated = clue.build_input([a, b], family, max_len=32)
    assert not truncated and row == [opener, *a, closer, *b, closer]

    # fMRI word rows.
    rows_seen: list = []
    monkeypatch.setattr(features, "pooled_hidden_states", lambda model, params, rows, pools, **kw: rows_seen.extend(rows))
    model = types.SimpleNamespace(config=types.SimpleNamespace(max_len=32))
    features.word_features(model, None, tokenizer, family, ["下雨"])
    assert rows_seen == [[opener, *tokenizer.encode("下雨"), closer]]


@pytest.mark.parametrize("family", FAMILIES)
def test_exported_tokenizer_frames_as_training(family, prepared):
    pytest.importorskip("tokenizers")
    from babylm_jax.hf import fast_tokenizer

    tokenizer = prepared[family].tokenizer
    fast = fast_tokenizer.build_fast_tokenizer(tokenizer, family)
    text_a, text_b = "今天下雨", "我们在家"
    framing = family_spec(family).framing
    a, b = tokenizer.encode(text_a), tokenizer.encode(text_b)
    assert fast.encode(text_a).ids == framing.frame(a)
    assert fast.encode(text_a, text_b).ids == framing.frame_segments([a, b])


def test_unknown_family_is_refused_by_key():
    with pytest.raises(ValueError, match="model.family"):
        family_spec("seq2seq")

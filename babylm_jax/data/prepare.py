"""Preparing the training data: budget check, tokenizer, token cache; each step skipped when cached.

    prepared = prepare_corpus(config, workdir)   # counts, trains/loads the tokenizer, tokenises

Writes `<workdir>/budget.json`, `<workdir>/tokenizer/` (the tokenizer the run trains with)
and the caches under `<workdir>/data/` (counting.py, token_cache.py).
"""
from __future__ import annotations

import dataclasses
import os
import pathlib
import shutil

from babylm_jax.atomic import atomic_dir
from babylm_jax.data import budget
from babylm_jax.data.cache_keys import token_cache_key, tokenizer_key
from babylm_jax.data.counting import CorpusCache, count_corpus
from babylm_jax.data.framing import framing_for
from babylm_jax.data.token_cache import TokenCache, tokenize_corpus
from babylm_jax.data.tokenizer import (Tokenizer, char_tokenizer_from_counts, load_tokenizer, required_characters,
                                       train_tokenizer)


@dataclasses.dataclass
class PreparedCorpus:
    """What `prepare` produces: the counted corpus, its budget report and the token cache."""

    corpus: CorpusCache
    budget_report: dict
    budget_path: pathlib.Path
    tokenizer: Tokenizer
    tokens: TokenCache


def line_filter_from_config(data_config):
    """The leakage line filter when `data.leakage.drop` is on, else None."""
    if not data_config.leakage.drop:
        return None
    from babylm_jax.data import leakage

    if not data_config.leakage.data_dir:
        raise ValueError("data.leakage.drop=True needs data.leakage.data_dir (the evaluation data directory)")
    return leakage.LeakDetector.from_data_dir(data_config.leakage.data_dir, int(data_config.leakage.ngram), data_config.normalize)


def tokenizer_training_texts(corpus: CorpusCache, limit: int):
    """About `limit` lines spread evenly over the corpus (SentencePiece input)."""
    total_lines = int(corpus.doc_array("doc_lines").sum())
    stride = max(1, total_lines // max(limit, 1))
    index = 0
    for text in corpus.iter_texts():
        for line in text.split("\n"):
            if index % stride == 0:
                yield line
            index += 1


def _train_or_load_tokenizer(corpus: CorpusCache, key: str, config) -> pathlib.Path:
    directory = corpus.root / f"tokenizer-{key}"
    if (directory / "tokenizer.json").exists():
        return directory
    tok_config, vocab_size = config.data.tokenizer, int(config.model.vocab_size)
    counts = corpus.char_counts()
    required = required_characters(tok_config.get("required_characters", ""), counts)
    if tok_config.kind == "char":
        tokenizer = char_tokenizer_from_counts(counts, vocab_size, int(tok_config.min_char_count),
                                               bool(tok_config.byte_fallback), required)
    else:
        tokenizer = train_tokenizer(tokenizer_training_texts(corpus, int(tok_config.training_sentences)), tok_config,
                                    vocab_size, required)
    with atomic_dir(directory) as tmp:
        tokenizer.save(tmp)
    return directory


def _publish_tokenizer(source: pathlib.Path, workdir: pathlib.Path, key: str) -> None:
    """Copies the tokenizer to <workdir>/tokenizer unless the same one is already there."""
    target = workdir / "tokenizer"
    stamp = target / "fingerprint.txt"
    if stamp.exists() and stamp.read_text() == key:
        return
    with atomic_dir(target, replace=True) as tmp:
        shutil.copytree(source, tmp, dirs_exist_ok=True)
        (tmp / "fingerprint.txt").write_text(key)


def prepare_corpus(config, workdir: str | os.PathLike) -> PreparedCorpus:
    """Budget check, tokenizer training and tokenisation; each step skipped when cached."""
    workdir = pathlib.Path(workdir)
    data_config = config.data
    line_filter = line_filter_from_config(data_config)
    corpus = count_corpus(data_config, workdir / "data", line_filter)
    report = budget.budget_report(corpus, int(data_config.word_budget), bool(data_config.allow_over_budget))
    budget_path = workdir / "budget.json"
    budget.enforce_budget(report, budget_path)
    key = tokenizer_key(corpus.root.name, config)
    tokenizer_dir = _train_or_load_tokenizer(corpus, key, config)
    tokenizer = load_tokenizer(tokenizer_dir)
    if tokenizer.vocab_size > int(config.model.vocab_size):
        raise ValueError(f"Tokenizer has {tokenizer.vocab_size} ids, more than model.vocab_size={config.model.vocab_size}")
    framing = framing_for(config.model.family)
    tokens = tokenize_corpus(corpus, tokenizer_dir, token_cache_key(key, framing), framing, data_config)
    _publish_tokenizer(tokenizer_dir, workdir, key)
    return PreparedCorpus(corpus, report, budget_path, tokenizer, tokens)

"""The `data.*` settings, typed and checked before any file is read.

    data = DataConfig.from_config(config.data)   # names any unknown, missing or bad key

configs/base.py holds every key and its default; this module holds their types and the rules
on their values. A new key: add it to base.py and a field here (nested settings are frozen
dataclasses of their own), and its rule to `validate`.
"""
from __future__ import annotations

import dataclasses
from typing import Any

from babylm_jax.config.typed import build
from babylm_jax.core.text import Normalizer

TOKENIZER_KINDS = ("unigram", "bpe", "char", "words")  # data.tokenizer.kind
WORD_COUNTERS = ("auto", "jieba")  # data.word_counter (corpus/segmenter.py)
REQUIRED_CHARACTERS = ("", "corpus_cjk", "cjk_basic", "corpus_cjk_parts")  # data.tokenizer.required_characters
PARTS_SETTING = "corpus_cjk_parts"  # corpus_cjk plus radicals and parts as tokens (SentencePiece: user symbols)
TXT_DOCUMENTS = ("blank_line", "line")  # data.txt_documents: one document per blank-line block or per line
ON_BAD_LINE = ("stop", "skip")  # data.on_bad_line
PACKINGS = ("concat", "first_fit")  # data.packing


@dataclasses.dataclass(frozen=True)
class TokenizerConfig:
    """`data.tokenizer.*`: what tokenizer prepare trains (see tokenizer.py)."""

    kind: str
    byte_fallback: bool
    character_coverage: float
    min_char_count: int
    required_characters: str
    training_sentences: int


@dataclasses.dataclass(frozen=True)
class LeakageConfig:
    """`data.leakage.*`: the overlap check against the evaluation items (see leakage.py)."""

    data_dir: str
    drop: bool
    ngram: int


@dataclasses.dataclass(frozen=True)
class DataConfig:
    """`data.*`: the corpus, how it is read, counted, tokenised and batched."""

    corpus: str
    paths: tuple[str, ...]
    text_field: str
    txt_documents: str
    max_documents: int
    eval_share: float
    word_budget: int
    allow_over_budget: bool
    tokenizer: TokenizerConfig
    packing: str
    whole_word_masking: bool
    normalize: Normalizer
    on_bad_line: str
    max_document_chars: int
    num_workers: int
    shard_chars: int
    word_counter: str
    reader_threads: int
    leakage: LeakageConfig

    @classmethod
    def from_config(cls, data_config: Any) -> "DataConfig":
        """Builds the data config from `config.data`, naming any unknown, missing or invalid key."""
        config = build(cls, data_config, "data.")
        config.validate()
        return config

    def validate(self) -> None:
        _one_of("data.tokenizer.kind", self.tokenizer.kind, TOKENIZER_KINDS)
        _one_of("data.tokenizer.required_characters", self.tokenizer.required_characters, REQUIRED_CHARACTERS)
        _one_of("data.txt_documents", self.txt_documents, TXT_DOCUMENTS)
        _one_of("data.on_bad_line", self.on_bad_line, ON_BAD_LINE)
        _one_of("data.packing", self.packing, PACKINGS)
        _one_of("data.word_counter", self.word_counter, WORD_COUNTERS)
        if not 0.0 <= self.eval_share < 1.0:
            raise ValueError(f"config key data.eval_share: {self.eval_share} is not in [0, 1)")
        if not 0.0 < self.tokenizer.character_coverage <= 1.0:
            raise ValueError(f"config key data.tokenizer.character_coverage: {self.tokenizer.character_coverage} "
                             "is not in (0, 1]")
        for key, value, least in (
            ("word_budget", self.word_budget, 1), ("max_documents", self.max_documents, 0),
            ("max_document_chars", self.max_document_chars, 0), ("num_workers", self.num_workers, 0),
            ("shard_chars", self.shard_chars, 1), ("reader_threads", self.reader_threads, 0),
            ("tokenizer.min_char_count", self.tokenizer.min_char_count, 1),
            ("tokenizer.training_sentences", self.tokenizer.training_sentences, 1),
            ("leakage.ngram", self.leakage.ngram, 1),
        ):
            if value < least:
                raise ValueError(f"config key data.{key}: {value} is below {least}")
        if self.leakage.drop and not self.leakage.data_dir:
            raise ValueError("config key data.leakage.drop=True needs data.leakage.data_dir (the evaluation data directory)")


def _one_of(key: str, value: str, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise ValueError(f"config key {key}: {value!r} is not one of {allowed}")

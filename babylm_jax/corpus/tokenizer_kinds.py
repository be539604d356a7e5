"""Tokenizer kinds (`data.tokenizer.kind`), one entry each: its class, and how it trains on texts and on the corpus cache.

    tokenizer = train_tokenizer(texts, config, vocab_size)      # config.kind, on texts
    tokenizer = KINDS[config.kind].from_corpus(corpus, corpus.char_counts(), config, vocab_size, required)  # prepare
    tokenizer = load_tokenizer(directory)                        # what `Tokenizer.save` wrote, by its kind

Everything that asks what a kind does reads this table; nothing else compares a kind's name. The names are
`config.data.TOKENIZER_KINDS` (the config checks `data.tokenizer.kind` there, before any file is read, and sits
below this room), and each kind's export is `hf.fast_tokenizer.EXPORTS`, keyed by the same names: a test holds
the three equal, as the attention backends' table and their kernels. Adding a kind: its `Tokenizer` subclass
(`corpus/tokenizer.py`, with `from_saved`), its training functions (`corpus/tokenizer_training.py`), its entry
here, its name in `TOKENIZER_KINDS` and its export in `EXPORTS`.
"""
from __future__ import annotations

import dataclasses
import os
import pathlib
from typing import TYPE_CHECKING, Callable, Iterable, Sequence

from babylm_jax.core.jsonl import read_json
from babylm_jax.corpus import tokenizer_training as training
from babylm_jax.corpus.tokenizer import CharTokenizer, SentencePieceTokenizer, Tokenizer, WordTokenizer

if TYPE_CHECKING:
    from babylm_jax.config.data import TokenizerConfig
    from babylm_jax.corpus.corpus_cache import CorpusCache


@dataclasses.dataclass(frozen=True)
class TokenizerKind:
    """One tokenizer kind: its class (whose `from_saved` reads back what `save` wrote) and how it trains."""

    tokenizer: type[Tokenizer]
    # (texts, config, vocab_size, required characters) -> the kind trained on `texts`
    train: Callable[[Iterable[str], TokenizerConfig, int, Sequence[str]], Tokenizer]
    # (corpus cache, its character counts, config, vocab_size, required characters) -> the kind trained as prepare does
    from_corpus: Callable[[CorpusCache, dict[str, int], TokenizerConfig, int, Sequence[str]], Tokenizer]


_SENTENCEPIECE = TokenizerKind(SentencePieceTokenizer, training.train_sentencepiece, training.sentencepiece_from_corpus)

KINDS: dict[str, TokenizerKind] = {  # in config.data.TOKENIZER_KINDS's order
    "unigram": _SENTENCEPIECE,  # SentencePiece unigram (its model type is the kind's name)
    "bpe": _SENTENCEPIECE,  # SentencePiece BPE
    "char": TokenizerKind(CharTokenizer, training.train_char, training.char_from_corpus),
    "words": TokenizerKind(WordTokenizer, training.train_words, training.words_from_corpus),
}


def train_tokenizer(texts: Iterable[str], config: TokenizerConfig, vocab_size: int, required: Sequence[str] = ()) -> Tokenizer:
    """Trains `config.kind` (a key of KINDS; checked by `config.data`) on `texts`; every `required` character
    gets its own id. The words kind counts the texts' jieba words here (prepare reads the counts the corpus
    cache recorded instead: `TokenizerKind.from_corpus`)."""
    return KINDS[config.kind].train(texts, config, vocab_size, required)


def load_tokenizer(directory: str | os.PathLike) -> Tokenizer:
    """Reads what `Tokenizer.save` wrote: tokenizer.json's kind names the class that reads the model file."""
    directory = pathlib.Path(directory)
    meta_path = directory / "tokenizer.json"
    fix = f"rerun prepare on the workdir (after moving {directory} aside) to rebuild it"
    meta = read_json(meta_path, fix)
    missing = [key for key in ("kind", "model_file", "byte_fallback") if not isinstance(meta, dict) or key not in meta]
    if missing:
        raise ValueError(f"{meta_path}: missing key(s) {missing}; {fix}")
    kind = KINDS.get(meta["kind"]) if isinstance(meta["kind"], str) else None
    if kind is None:
        raise ValueError(f"{meta_path}: unknown tokenizer kind {meta['kind']!r}; {fix}")
    return kind.tokenizer.from_saved(directory / meta["model_file"], meta, fix)

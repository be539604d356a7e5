"""The keys that name the prepare caches: corpus, tokenizer and token cache.

A key hashes every setting that changes what the cached step writes, so a changed setting
gets a new directory and an unchanged one reuses the old. The corpus is keyed by its files'
content (`sources.corpus_files`: names under their sources' roots, sizes, sha256), never by their
place or dates: a workdir and its corpus copied anywhere find their caches.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
from typing import Any

from babylm_jax.config.data import DataConfig, TokenizerConfig
from babylm_jax.core.vocab import Framing
from babylm_jax.corpus.sources import READING_RULES

CACHE_VERSION = 1


def fingerprint(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:16]


def corpus_key(data_config: DataConfig, files: dict[str, dict], line_filter) -> str:
    """The counted corpus's key: its files (`sources.corpus_files`) and the settings that change what is
    read and how (`corpus_settings`)."""
    return fingerprint({"files": [[name, r["bytes"], r["sha256"]] for name, r in files.items()],
                        **corpus_settings(data_config, line_filter)})


def corpus_settings(data_config: DataConfig, line_filter) -> dict[str, Any]:
    """The settings that change what the counted corpus holds, by config key (the version of the cache too)."""
    return {
        "version": CACHE_VERSION,
        "reading_rules": fingerprint(READING_RULES),
        "text_field": data_config.text_field,
        "txt_documents": data_config.txt_documents,
        "max_documents": data_config.max_documents,
        "max_document_chars": data_config.max_document_chars,
        "on_bad_line": data_config.on_bad_line,
        "normalize": dataclasses.asdict(data_config.normalize),
        "shard_chars": data_config.shard_chars,
        "line_filter": getattr(line_filter, "fingerprint", None),
    }


def tokenizer_key(corpus_key_: str, tokenizer: TokenizerConfig, vocab_size: int) -> str:
    """The tokenizer's key: the corpus's, plus every `data.tokenizer` setting and `model.vocab_size`."""
    return fingerprint({"corpus": corpus_key_, "tokenizer": dataclasses.asdict(tokenizer), "vocab_size": vocab_size})


def token_cache_key(tokenizer_key_: str, framing: Framing) -> str:
    """The token cache's key: the tokenizer's, plus the documents' framing."""
    return fingerprint({"tokenizer": tokenizer_key_, "framing": dataclasses.asdict(framing)})

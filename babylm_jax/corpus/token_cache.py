"""Prepare step 3: tokenise the counted corpus into an on-disk token cache, in worker processes.

Layout under `<workdir>/data/corpus-<ckey>/`:
    tokens-<tkey>/     tokens.npy (uint16/uint32, documents framed as the model family's
                       framing says: [bos] ids [eos] or [cls] ids [sep]), doc_offsets.npy,
                       doc_words.npy, word_starts.npy (uint8 per token), index.json (written
                       last, with the size and sha256 of every other file, checked at each
                       load: a changed or truncated cache is rebuilt); tokenizer/ (the
                       tokenizer they used)
`tkey` (cache_keys.token_cache_key) adds the tokenizer settings and the framing to the
corpus key. Each shard is tokenised into `tokens-<tkey>.shards/` (whole shards only; a
re-run skips them), then the shards are merged into one directory, renamed into place.
"""
from __future__ import annotations

import dataclasses
import itertools
import json
import pathlib
import shutil

import numpy as np
from absl import logging

from babylm_jax.core.atomic import atomic_dir, atomic_write_json
from babylm_jax.corpus.cache_integrity import file_records, problems
from babylm_jax.corpus.corpus_cache import CorpusCache
from babylm_jax.core.vocab import Framing
from babylm_jax.corpus.tokenizer import Tokenizer
from babylm_jax.corpus.tokenizer_kinds import load_tokenizer
from babylm_jax.core.workers import num_workers, run_tasks

_TOKENIZERS: dict[str, Tokenizer] = {}


def tokenize_shard(count_dir: str, out_dir: str, tokenizer_dir: str, framing: Framing) -> str:
    """Token ids of one counted shard, each document framed, with per-token word starts."""
    if tokenizer_dir not in _TOKENIZERS:
        _TOKENIZERS[tokenizer_dir] = load_tokenizer(tokenizer_dir)
    tokenizer = _TOKENIZERS[tokenizer_dir]
    count_dir_p = pathlib.Path(count_dir)
    texts = json.loads((count_dir_p / "texts.json").read_text())
    doc_chars_D = np.load(count_dir_p / "doc_chars.npy")
    char_bits = np.unpackbits(np.load(count_dir_p / "word_bits.npy"), count=int(doc_chars_D.sum())).astype(bool)
    ids_per_doc = tokenizer.encode_batch(texts)
    lengths_D = np.fromiter(map(len, ids_per_doc), np.int64, count=len(ids_per_doc))
    ids_T = np.fromiter(itertools.chain.from_iterable(ids_per_doc), np.int64, count=int(lengths_D.sum()))
    word_start_T = _word_starts(tokenizer.offsets_batch(texts, ids_per_doc), lengths_D, doc_chars_D, char_bits)
    dtype = token_dtype(tokenizer.vocab_size)
    with atomic_dir(pathlib.Path(out_dir)) as tmp:
        np.save(tmp / "tokens.npy", _framed(ids_T, lengths_D, framing.opener_id, framing.closer_id).astype(dtype))
        np.save(tmp / "word_starts.npy", _framed(word_start_T, lengths_D, 1, 1).astype(np.uint8))
        np.save(tmp / "doc_lengths.npy", lengths_D + 2)
    return out_dir


def _word_starts(spans_Tx2: np.ndarray, lengths_D: np.ndarray, doc_chars_D: np.ndarray, char_bits: np.ndarray) -> np.ndarray:
    """[T] bool: the token is the first of its character and that character begins a jieba word."""
    doc_T = np.repeat(np.arange(len(lengths_D)), lengths_D)
    first_of_char_T = np.ones(len(doc_T), bool)
    first_of_char_T[1:] = spans_Tx2[1:, 0] != spans_Tx2[:-1, 0]
    first_of_char_T[(np.cumsum(lengths_D) - lengths_D)[lengths_D > 0]] = True
    chars_T = doc_chars_D[doc_T]
    in_text_T = spans_Tx2[:, 0] < chars_T
    char_base_D = np.cumsum(doc_chars_D) - doc_chars_D
    start_T = char_base_D[doc_T] + np.minimum(spans_Tx2[:, 0], np.maximum(chars_T - 1, 0))
    return first_of_char_T & in_text_T & char_bits[start_T]


def _framed(values_T: np.ndarray, lengths_D: np.ndarray, opener, closer) -> np.ndarray:
    """Each document's values between `opener` and `closer`, as `Framing.frame` wraps one document."""
    out = np.empty(len(values_T) + 2 * len(lengths_D), values_T.dtype)
    opens_D = np.cumsum(lengths_D + 2) - (lengths_D + 2)
    out[opens_D] = opener
    out[opens_D + lengths_D + 1] = closer
    out[np.arange(len(values_T)) + 2 * np.repeat(np.arange(len(lengths_D)), lengths_D) + 1] = values_T
    return out


def _concatenate_to(path: pathlib.Path, parts: list[pathlib.Path]) -> int:
    """Writes the 1-D arrays in `parts`, one after another, as one .npy file, a part at a time (memory
    stays one part's, whatever the corpus's size); returns the length."""
    arrays = [np.load(part, mmap_mode="r") for part in parts]
    total = sum(len(a) for a in arrays)
    out = np.lib.format.open_memmap(path, mode="w+", dtype=arrays[0].dtype, shape=(total,))
    position = 0
    for array in arrays:
        out[position:position + len(array)] = array
        position += len(array)
    out.flush()
    del out
    return total


def token_dtype(vocab_size: int) -> type:
    return np.uint16 if vocab_size <= np.iinfo(np.uint16).max + 1 else np.uint32


def cache_problem(directory: pathlib.Path) -> str | None:
    """What is wrong with a finished token cache (a changed, truncated or missing file), or None."""
    index_path = directory / "index.json"
    try:
        recorded = json.loads(index_path.read_text())["files"]
    except (OSError, ValueError, KeyError, TypeError):
        return f"{index_path} has no record of the files' sizes and checksums"
    return next(iter(problems(directory, recorded).values()), None)


@dataclasses.dataclass
class TokenCache:
    """Flat token arrays (memory-mapped) of a tokenised corpus."""

    directory: pathlib.Path
    tokens: np.ndarray  # [total tokens] uint16/uint32
    doc_offsets: np.ndarray  # [documents + 1] int64
    doc_words: np.ndarray  # [documents] int64
    word_starts: np.ndarray  # [total tokens] uint8

    @classmethod
    def load(cls, directory: pathlib.Path) -> "TokenCache":
        load = lambda name: np.load(directory / f"{name}.npy", mmap_mode="r")  # noqa: E731
        return cls(directory, load("tokens"), np.asarray(load("doc_offsets")), np.asarray(load("doc_words")), load("word_starts"))

    @property
    def num_documents(self) -> int:
        return len(self.doc_offsets) - 1


def tokenize_corpus(
    cache: CorpusCache, tokenizer_dir: pathlib.Path, key: str, framing: Framing, workers: int
) -> TokenCache:
    """Tokenises every counted shard into `cache.root/tokens-<key>` and merges the shards.

    `workers` is `data.num_workers` (0: every core).
    """
    directory = cache.root / f"tokens-{key}"
    if (directory / "index.json").exists():
        problem = cache_problem(directory)
        if problem is None:
            return TokenCache.load(directory)
        logging.warning("token cache %s is damaged (%s); rebuilding it", directory, problem)
        shutil.rmtree(directory)
    shard_root = cache.root / f"tokens-{key}.shards"
    tasks = [
        (str(d), str(shard_root / d.name), str(tokenizer_dir), framing)
        for d in cache.shard_dirs
        if not (shard_root / d.name).exists()
    ]
    run_tasks(tokenize_shard, tasks, min(num_workers(workers), max(len(tasks), 1)), len(tasks), "tokenise")
    shards = [shard_root / d.name for d in cache.shard_dirs]
    with atomic_dir(directory) as tmp:
        lengths = np.concatenate([np.load(s / "doc_lengths.npy") for s in shards])
        tokens = _concatenate_to(tmp / "tokens.npy", [s / "tokens.npy" for s in shards])
        _concatenate_to(tmp / "word_starts.npy", [s / "word_starts.npy" for s in shards])
        np.save(tmp / "doc_offsets.npy", np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64))
        np.save(tmp / "doc_words.npy", cache.doc_array("doc_words"))
        shutil.copytree(tokenizer_dir, tmp / "tokenizer")
        atomic_write_json(tmp / "index.json", {"documents": int(len(lengths)), "tokens": tokens,
                                               "files": file_records(tmp)})
    shutil.rmtree(shard_root, ignore_errors=True)
    return TokenCache.load(directory)

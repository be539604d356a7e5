"""Prepare steps: sharded counting and tokenisation into an on-disk token cache.

Layout under `<workdir>/data/`:
    corpus-<ckey>/shards/NNNNN/      normalised texts.json, doc_words, doc_chars, doc_lines,
                                     doc_source, word_bits (jieba word starts per character,
                                     packed), char_counts.json
    corpus-<ckey>/tokens-<tkey>/     tokens.npy (uint16/uint32, documents framed as the model
                                     family's framing says: [bos] ids [eos] or [cls] ids [sep]),
                                     doc_offsets.npy, doc_words.npy, word_starts.npy (uint8 per
                                     token), index.json; tokenizer/ (the tokenizer they used)
`ckey` hashes the corpus files and reading/normalisation settings; `tkey` adds the tokenizer
settings and the framing. Every shard and final array is written to a temporary path and renamed, so an
interrupted run leaves only whole shards; a re-run skips them.
"""
from __future__ import annotations

import collections
import contextlib
import dataclasses
import hashlib
import json
import multiprocessing
import os
import pathlib
import shutil
import tempfile
from typing import Any, Callable, Iterable, Iterator

import numpy as np
import tqdm

from babylm_jax.atomic import atomic_write_json
from babylm_jax.data import corpus, words
from babylm_jax.data.framing import Framing
from babylm_jax.data.tokenizer import Tokenizer, load_tokenizer

CACHE_VERSION = 1


def fingerprint(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:16]


def num_workers(data_config) -> int:
    n = int(data_config.get("num_workers", 0))
    return n if n > 0 else (os.cpu_count() or 1)


@contextlib.contextmanager
def atomic_dir(final: pathlib.Path, replace: bool = False) -> Iterator[pathlib.Path]:
    """A temporary directory renamed to `final` on success, removed on failure.

    An existing `final` is kept (another process finished the same shard first) unless
    `replace`, when it is moved aside and swapped out for the new directory.
    """
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = pathlib.Path(tempfile.mkdtemp(dir=final.parent, prefix=f".{final.name}.tmp"))
    old = None
    try:
        yield tmp
        if replace and final.exists():
            old = pathlib.Path(tempfile.mkdtemp(dir=final.parent, prefix=f".{final.name}.old"))
            os.replace(final, old / final.name)
        try:
            os.replace(tmp, final)
        except OSError:
            if not final.exists():
                raise
    finally:
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


# ---------------------------------------------------------------------------- workers


def _init_worker() -> None:
    words.init_jieba()


def count_shard(out_dir: str, raw: list[tuple[int, str]], normalize: Callable[[str], str], line_filter) -> str:
    """Normalises one shard of raw documents, counts jieba words, records word starts."""
    texts, sources, doc_words, doc_chars, doc_lines, bits = [], [], [], [], [], []
    char_counts: collections.Counter = collections.Counter()
    dropped_lines = 0
    for source, text in raw:
        text = normalize(text)
        if line_filter is not None and text:
            lines = text.split("\n")
            keep = line_filter.keep_lines(lines)
            dropped_lines += int((~keep).sum())
            text = "\n".join(line for line, k in zip(lines, keep) if k)
        if not text.strip():
            continue
        segmented = words.jieba_words(text)
        texts.append(text)
        sources.append(source)
        doc_words.append(len(segmented))
        doc_chars.append(len(text))
        doc_lines.append(text.count("\n") + 1)
        bits.append(words.word_start_mask(segmented))
        char_counts.update(text)
    final = pathlib.Path(out_dir)
    with atomic_dir(final) as tmp:
        (tmp / "texts.json").write_text(json.dumps(texts, ensure_ascii=False))
        np.save(tmp / "doc_source.npy", np.asarray(sources, np.int32))
        np.save(tmp / "doc_words.npy", np.asarray(doc_words, np.int64))
        np.save(tmp / "doc_chars.npy", np.asarray(doc_chars, np.int64))
        np.save(tmp / "doc_lines.npy", np.asarray(doc_lines, np.int64))
        np.save(tmp / "word_bits.npy", np.packbits(np.concatenate(bits) if bits else np.zeros(0, bool)))
        (tmp / "char_counts.json").write_text(json.dumps(char_counts, ensure_ascii=False))
        (tmp / "dropped_lines.json").write_text(json.dumps(dropped_lines))
    return out_dir


_TOKENIZERS: dict[str, Tokenizer] = {}


def tokenize_shard(count_dir: str, out_dir: str, tokenizer_dir: str, framing: Framing) -> str:
    """Token ids of one counted shard, each document framed, with per-token word starts."""
    if tokenizer_dir not in _TOKENIZERS:
        _TOKENIZERS[tokenizer_dir] = load_tokenizer(tokenizer_dir)
    tokenizer = _TOKENIZERS[tokenizer_dir]
    count_dir_p = pathlib.Path(count_dir)
    texts = json.loads((count_dir_p / "texts.json").read_text())
    doc_chars = np.load(count_dir_p / "doc_chars.npy")
    char_bits = np.unpackbits(np.load(count_dir_p / "word_bits.npy"), count=int(doc_chars.sum())).astype(bool)
    char_base = np.cumsum(doc_chars) - doc_chars
    dtype = token_dtype(tokenizer.vocab_size)
    pieces, starts, lengths = [], [], []
    for text, ids, base in zip(texts, tokenizer.encode_batch(texts), char_base.tolist()):
        ids_T = np.asarray(ids, dtype=np.int64)
        spans_Tx2 = tokenizer.offsets_array(text, ids)
        first_of_char_T = np.ones(len(ids), bool)
        first_of_char_T[1:] = spans_Tx2[1:, 0] != spans_Tx2[:-1, 0]
        in_text_T = spans_Tx2[:, 0] < len(text)
        start_T = base + np.minimum(spans_Tx2[:, 0], max(len(text) - 1, 0))
        word_start_T = first_of_char_T & in_text_T & char_bits[start_T]
        pieces.append(np.asarray(framing.frame(ids_T.tolist()), dtype=dtype))
        starts.append(np.concatenate([[1], word_start_T, [1]]).astype(np.uint8))
        lengths.append(len(ids) + 2)
    with atomic_dir(pathlib.Path(out_dir)) as tmp:
        np.save(tmp / "tokens.npy", np.concatenate(pieces) if pieces else np.zeros(0, dtype))
        np.save(tmp / "word_starts.npy", np.concatenate(starts) if starts else np.zeros(0, np.uint8))
        np.save(tmp / "doc_lengths.npy", np.asarray(lengths, np.int64))
    return out_dir


def token_dtype(vocab_size: int) -> type:
    return np.uint16 if vocab_size <= np.iinfo(np.uint16).max + 1 else np.uint32


# ---------------------------------------------------------------------------- running


def _run(
    fn: Callable, tasks: Iterable[tuple], workers: int, total: int | None, desc: str,
    initializer: Callable[[], None] | None = None,
) -> None:
    """Runs `fn(*task)` for every task with at most 2 x workers tasks in flight; inline for 1 worker."""
    bar = tqdm.tqdm(total=total, desc=desc, unit="shard", leave=False)
    if workers <= 1:
        if initializer is not None:
            initializer()
        for task in tasks:
            fn(*task)
            bar.update()
        bar.close()
        return
    with multiprocessing.get_context("spawn").Pool(workers, initializer=initializer) as pool:
        pending: collections.deque = collections.deque()
        for task in tasks:
            pending.append(pool.apply_async(fn, task))
            while len(pending) >= 2 * workers:
                pending.popleft().get()
                bar.update()
        while pending:
            pending.popleft().get()
            bar.update()
    bar.close()


@dataclasses.dataclass
class CorpusCache:
    """The counted, normalised corpus: one directory per shard."""

    root: pathlib.Path
    sources: list[corpus.Source]
    shard_dirs: list[pathlib.Path]

    def doc_array(self, name: str) -> np.ndarray:
        return np.concatenate([np.load(d / f"{name}.npy") for d in self.shard_dirs]) if self.shard_dirs else np.zeros(0, np.int64)

    def char_counts(self) -> collections.Counter:
        total: collections.Counter = collections.Counter()
        for d in self.shard_dirs:
            total.update(json.loads((d / "char_counts.json").read_text()))
        return total

    def dropped_lines(self) -> int:
        return sum(json.loads((d / "dropped_lines.json").read_text()) for d in self.shard_dirs)

    def iter_texts(self) -> Iterator[str]:
        for d in self.shard_dirs:
            yield from json.loads((d / "texts.json").read_text())


def corpus_key(data_config, sources: list[corpus.Source], line_filter) -> str:
    return fingerprint(
        {
            "version": CACHE_VERSION,
            "files": corpus.source_fingerprint(sources),
            "text_field": data_config.text_field,
            "txt_documents": data_config.txt_documents,
            "max_documents": int(data_config.max_documents),
            "max_document_chars": int(data_config.max_document_chars),
            "on_bad_line": data_config.on_bad_line,
            "normalize": data_config.normalize.to_dict(),
            "shard_chars": int(data_config.shard_chars),
            "line_filter": getattr(line_filter, "fingerprint", None),
        }
    )


def _raw_shards(sources, data_config) -> Iterator[list[tuple[int, str]]]:
    """Raw documents grouped into shards of about `data.shard_chars` characters (deterministic)."""
    shard, chars = [], 0
    limit = int(data_config.shard_chars)
    for source, text in corpus.iter_raw_documents(sources, data_config):
        shard.append((source, text))
        chars += len(text)
        if chars >= limit:
            yield shard
            shard, chars = [], 0
    if shard:
        yield shard


def count_corpus(data_config, root: pathlib.Path, line_filter=None) -> CorpusCache:
    """Normalises and counts the corpus into `root/corpus-<key>`, skipping finished shards."""
    sources = corpus.list_sources(data_config)
    directory = root / f"corpus-{corpus_key(data_config, sources, line_filter)}"
    index_path = directory / "index.json"
    if index_path.exists():
        n = json.loads(index_path.read_text())["shards"]
        return CorpusCache(directory, sources, [directory / "shards" / f"{i:05d}" for i in range(n)])
    normalize = corpus.make_normalizer(data_config.normalize)
    shard_dirs: list[pathlib.Path] = []

    def tasks():
        for i, raw in enumerate(_raw_shards(sources, data_config)):
            out = directory / "shards" / f"{i:05d}"
            shard_dirs.append(out)
            if not out.exists():
                yield (str(out), raw, normalize, line_filter)

    _run(count_shard, tasks(), num_workers(data_config), None, "count words", initializer=_init_worker)
    cache = CorpusCache(directory, sources, shard_dirs)
    if not cache.shard_dirs or not int(cache.doc_array("doc_words").sum()):
        names = ", ".join(s.name for s in sources)
        raise corpus.CorpusError(f"Empty corpus: no text in {names} after normalisation")
    atomic_write_json(index_path, {"shards": len(shard_dirs)})
    return cache


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
    cache: CorpusCache, tokenizer_dir: pathlib.Path, key: str, framing: Framing, data_config
) -> TokenCache:
    """Tokenises every counted shard into `cache.root/tokens-<key>` and merges the shards."""
    directory = cache.root / f"tokens-{key}"
    if (directory / "index.json").exists():
        return TokenCache.load(directory)
    shard_root = cache.root / f"tokens-{key}.shards"
    tasks = [
        (str(d), str(shard_root / d.name), str(tokenizer_dir), framing)
        for d in cache.shard_dirs
        if not (shard_root / d.name).exists()
    ]
    _run(tokenize_shard, tasks, min(num_workers(data_config), max(len(tasks), 1)), len(tasks), "tokenise")
    shards = [shard_root / d.name for d in cache.shard_dirs]
    with atomic_dir(directory) as tmp:
        tokens = np.concatenate([np.load(s / "tokens.npy") for s in shards])
        lengths = np.concatenate([np.load(s / "doc_lengths.npy") for s in shards])
        np.save(tmp / "tokens.npy", tokens)
        np.save(tmp / "word_starts.npy", np.concatenate([np.load(s / "word_starts.npy") for s in shards]))
        np.save(tmp / "doc_offsets.npy", np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64))
        np.save(tmp / "doc_words.npy", cache.doc_array("doc_words"))
        shutil.copytree(tokenizer_dir, tmp / "tokenizer")
        atomic_write_json(tmp / "index.json", {"documents": int(len(lengths)), "tokens": int(len(tokens))})
    shutil.rmtree(shard_root, ignore_errors=True)
    return TokenCache.load(directory)

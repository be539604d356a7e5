"""Prepare step 1: normalise the corpus and count its jieba words, in sharded worker processes.

Layout under `<workdir>/data/`:
    corpus-<ckey>/shards/NNNNN/      normalised texts.json, doc_words, doc_chars, doc_lines,
                                     doc_source, word_bits (jieba word starts per character,
                                     packed), char_counts.json, dropped_lines.json,
                                     raw_words.json (source -> the official count of the
                                     documents as read, before normalisation and filtering),
                                     checks.json (the segmenter that counted it, and how many of
                                     its documents were checked against jieba.cut)
    corpus-<ckey>/index.json         the number of shards and the size and sha256 of every shard
                                     file, written last; checked at each load (damaged shards
                                     are counted again); what it was counted from (`made_from`:
                                     the corpus files by name, size and sha256, and the settings)
`ckey` (cache_keys.corpus_key) hashes the corpus files' names, sizes and sha256 and the
reading/normalisation settings: never their place or dates, so a workdir and its corpus
copied anywhere count nothing again. Where a corpus is counted while another counted corpus
is there, one line first says what differs from the closest one. A file that changed between
its listing and the end of the count is named and the count removed (it would be keyed by what
the file was, holding what it became).
Every shard is written to a temporary path and renamed, so an interrupted run leaves only
whole shards; a re-run skips them.
"""
from __future__ import annotations

import collections
import dataclasses
import functools
import json
import logging as stdlib_logging
import pathlib
import shutil
from typing import Callable, Iterator

import numpy as np
from absl import logging

from babylm_jax.core.atomic import atomic_dir, atomic_write_json
from babylm_jax.corpus import sources as corpus
from babylm_jax.corpus import segmenter, words
from babylm_jax.corpus.cache_integrity import FileHashes, differences, file_records, problems
from babylm_jax.corpus.cache_keys import corpus_key, corpus_settings
from babylm_jax.config.data import DataConfig
from babylm_jax.core.workers import chunks_by_chars, num_workers, run_tasks


# What the corpus settings (cache_keys.corpus_settings) are called where a recount names them.
_SETTING_NAMES = {"version": "the counted corpus's format", "line_filter": "the leakage filter (data.leakage)",
                  "reading_rules": "how the readers cut files into documents (sources.READING_RULES)"}
CHECK_EVERY = 200  # every 200th document of a shard counted by the faster segmenter is checked against jieba.cut
_WORD_LENGTHS: tuple[Callable[[str], list[int]], str] | None = None


def _init_worker(use_port: bool = True) -> None:
    """Loads jieba (and the faster exact segmenter, where wanted and installed) once per process."""
    global _WORD_LENGTHS
    words.init_jieba()
    _WORD_LENGTHS = segmenter.make_word_lengths(use_port)


def _jieba_lengths(text: str) -> list[int]:
    return [len(word) for word in words.jieba_words(text)]


@dataclasses.dataclass
class _ShardCounts:
    texts: list[str] = dataclasses.field(default_factory=list)
    sources: list[int] = dataclasses.field(default_factory=list)
    doc_words: list[int] = dataclasses.field(default_factory=list)
    doc_chars: list[int] = dataclasses.field(default_factory=list)
    doc_lines: list[int] = dataclasses.field(default_factory=list)
    bits: list[np.ndarray] = dataclasses.field(default_factory=list)
    char_counts: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    raw_words: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    dropped_lines: int = 0
    checked: int = 0  # documents also cut by jieba.cut


def _count_documents(raw: list[tuple[int, str]], normalize: Callable[[str], str], line_filter,
                     word_lengths: Callable[[str], list[int]], check_every: int) -> _ShardCounts | None:
    """Normalises and counts one shard's documents with `word_lengths`; every `check_every`-th document
    (0: none) is also cut by jieba itself. None if one of those differs."""
    counts = _ShardCounts()
    for i, (source, raw_text) in enumerate(raw):
        text = normalize(raw_text)
        if line_filter is not None and text:
            lines = text.split("\n")
            keep = line_filter.keep_lines(lines)
            counts.dropped_lines += int((~keep).sum())
            text = "\n".join(line for line, k in zip(lines, keep) if k)
        kept = bool(text.strip())
        lengths = word_lengths(text) if kept else []
        raw_count = len(lengths) if kept and text == raw_text else len(word_lengths(raw_text))
        if check_every and i % check_every == 0:
            if raw_count != len(words.jieba_words(raw_text)) or (kept and lengths != _jieba_lengths(text)):
                logging.warning("the faster segmenter cut a document differently from jieba.cut (it starts %r); "
                                "counting its shard with jieba.cut", raw_text[:30])
                return None
            counts.checked += 1
        counts.raw_words[source] += raw_count
        if not kept:
            continue
        counts.texts.append(text)
        counts.sources.append(source)
        counts.doc_words.append(len(lengths))
        counts.doc_chars.append(len(text))
        counts.doc_lines.append(text.count("\n") + 1)
        counts.bits.append(words.start_mask(lengths))
        counts.char_counts.update(text)
    return counts


def count_shard(out_dir: str, raw: list[tuple[int, str]], normalize: Callable[[str], str], line_filter) -> str:
    """Normalises one shard of raw documents, counts jieba words (as read and as kept), records word starts."""
    word_lengths, name = _WORD_LENGTHS or segmenter.make_word_lengths(False)
    counts = _count_documents(raw, normalize, line_filter, word_lengths, CHECK_EVERY if name != "jieba.cut" else 0)
    if counts is None:
        name = "jieba.cut (the faster segmenter differed on a checked document)"
        counts = _count_documents(raw, normalize, line_filter, _jieba_lengths, 0)
    checks = {"counter": name, **({"checked": counts.checked} if counts.checked else {})}
    final = pathlib.Path(out_dir)
    with atomic_dir(final) as tmp:
        (tmp / "texts.json").write_text(json.dumps(counts.texts, ensure_ascii=False))
        np.save(tmp / "doc_source.npy", np.asarray(counts.sources, np.int32))
        np.save(tmp / "doc_words.npy", np.asarray(counts.doc_words, np.int64))
        np.save(tmp / "doc_chars.npy", np.asarray(counts.doc_chars, np.int64))
        np.save(tmp / "doc_lines.npy", np.asarray(counts.doc_lines, np.int64))
        bits = np.concatenate(counts.bits) if counts.bits else np.zeros(0, bool)
        np.save(tmp / "word_bits.npy", np.packbits(bits))
        (tmp / "char_counts.json").write_text(json.dumps(counts.char_counts, ensure_ascii=False))
        (tmp / "dropped_lines.json").write_text(json.dumps(counts.dropped_lines))
        (tmp / "raw_words.json").write_text(json.dumps(counts.raw_words))
        (tmp / "checks.json").write_text(json.dumps(checks))
    return out_dir


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

    def word_counts(self, min_chars: int = 2) -> collections.Counter:
        """How often each jieba word of at least `min_chars` characters occurs in the kept documents (the
        words the count recorded: each shard's word starts over its texts)."""
        total: collections.Counter = collections.Counter()
        for d in self.shard_dirs:
            text = "".join(json.loads((d / "texts.json").read_text()))
            starts = np.flatnonzero(np.unpackbits(np.load(d / "word_bits.npy"), count=len(text))).tolist()
            total.update(w for w in map(text.__getitem__, map(slice, starts, starts[1:] + [len(text)]))
                         if len(w) >= min_chars)
        return total

    def raw_words(self) -> dict[int, int]:
        """Source index -> `len(list(jieba.cut(text)))` summed over its documents as read (before normalisation)."""
        total: collections.Counter = collections.Counter()
        for d in self.shard_dirs:
            total.update({int(k): v for k, v in json.loads((d / "raw_words.json").read_text()).items()})
        return {i: total.get(i, 0) for i in range(len(self.sources))}

    def checks(self) -> dict:
        """How the shards were counted: shards per segmenter, and documents checked against jieba.cut."""
        counted_by: collections.Counter = collections.Counter()
        checked = 0
        for d in self.shard_dirs:
            path = d / "checks.json"
            record = json.loads(path.read_text()) if path.exists() else {"counter": "jieba.cut"}
            counted_by[record["counter"]] += 1
            checked += record.get("checked", 0)
        return {"shards_counted_by": dict(counted_by), "documents_checked_against_jieba_cut": checked}

    def dropped_lines(self) -> int:
        return sum(json.loads((d / "dropped_lines.json").read_text()) for d in self.shard_dirs)

    def iter_texts(self) -> Iterator[str]:
        for d in self.shard_dirs:
            yield from json.loads((d / "texts.json").read_text())


def count_raw_shard(out_dir: str, raw: list[tuple[int, str]]) -> str:
    """Adds raw_words.json to a shard counted before it existed (the same documents, counted as read)."""
    raw_words: collections.Counter = collections.Counter()
    for source, text in raw:
        raw_words[source] += len(words.jieba_words(text))
    atomic_write_json(pathlib.Path(out_dir) / "raw_words.json", raw_words)
    return out_dir


def _raw_shards(sources: list[corpus.Source], data_config: DataConfig) -> Iterator[list[tuple[int, str]]]:
    """Raw documents grouped into shards of about `data.shard_chars` characters (deterministic)."""
    documents = corpus.iter_raw_documents(sources, data_config)
    return chunks_by_chars(documents, lambda document: len(document[1]), data_config.shard_chars)


def _shards_to_count(sources: list[corpus.Source], data_config: DataConfig, directory: pathlib.Path) -> int:
    """How many shards still need counting: one quick read of the corpus (its skipped-line warnings muted), for the bar."""
    previous = stdlib_logging.root.manager.disable
    stdlib_logging.disable(stdlib_logging.WARNING)
    try:
        return sum(not (directory / "shards" / f"{i:05d}").exists() for i, _ in enumerate(_raw_shards(sources, data_config)))
    finally:
        stdlib_logging.disable(previous)


def count_corpus(data_config: DataConfig, root: pathlib.Path, line_filter=None,
                 files: dict[str, dict] | None = None, sources: list[corpus.Source] | None = None) -> CorpusCache:
    """Normalises and counts the corpus into `root/corpus-<key>`, skipping finished shards.

    `files`: the corpus's files (`sources.corpus_files`), where the caller has them (hashed here otherwise);
    `sources`: the run's sources (`hanzi_facts.run_sources`), else data.corpus and data.paths."""
    sources = sources if sources is not None else corpus.list_sources(data_config)
    files = files if files is not None else corpus.corpus_files(sources, FileHashes(None))
    made_from = json.loads(json.dumps({"files": files, "settings": corpus_settings(data_config, line_filter)}))
    directory = root / f"corpus-{corpus_key(data_config, files, line_filter)}"
    index_path = directory / "index.json"
    if index_path.exists() and not _remove_damaged_shards(directory):
        n = json.loads(index_path.read_text())["shards"]
        cache = CorpusCache(directory, sources, [directory / "shards" / f"{i:05d}" for i in range(n)])
        if not all((d / "raw_words.json").exists() for d in cache.shard_dirs):  # counted before words_raw existed
            raw_tasks = ((str(d), raw) for d, raw in zip(cache.shard_dirs, _raw_shards(sources, data_config))
                         if not (d / "raw_words.json").exists())
            missing = sum(not (d / "raw_words.json").exists() for d in cache.shard_dirs)
            run_tasks(count_raw_shard, raw_tasks, num_workers(data_config.num_workers), missing, "count words as read",
                      initializer=words.init_jieba)
            if "files" in json.loads(index_path.read_text()):  # record the new files' checksums too
                atomic_write_json(index_path, {"shards": n, "files": file_records(directory / "shards")})
        return cache
    reason = None if directory.exists() else _why_count_again(root, made_from)
    if reason:
        logging.warning("counting the corpus again into %s: %s", directory, reason)
    normalize = data_config.normalize
    shard_dirs: list[pathlib.Path] = []

    def tasks():
        for i, raw in enumerate(_raw_shards(sources, data_config)):
            out = directory / "shards" / f"{i:05d}"
            shard_dirs.append(out)
            if not out.exists():
                yield (str(out), raw, normalize, line_filter)

    total = _shards_to_count(sources, data_config, directory)
    run_tasks(count_shard, tasks(), num_workers(data_config.num_workers), total, "count words",
              initializer=functools.partial(_init_worker, data_config.word_counter == "auto"))
    _check_unchanged(sources, files, directory)
    cache = CorpusCache(directory, sources, shard_dirs)
    if not cache.shard_dirs or not int(cache.doc_array("doc_words").sum()):
        names = ", ".join(s.name for s in sources)
        raise corpus.CorpusError(f"Empty corpus: no text in {names} after normalisation")
    atomic_write_json(index_path, {"shards": len(shard_dirs), "files": file_records(directory / "shards"),
                                   "made_from": made_from})
    return cache


def _check_unchanged(sources: list[corpus.Source], files: dict[str, dict], directory: pathlib.Path) -> None:
    """Refuses a count during which a corpus file changed (it was read as it is now, but keyed as it was when
    listed: the cache would be reused with documents that are not in that corpus), removing what it counted.
    A file unchanged in place is not read again (`FileHashes`)."""
    changes = differences(files, corpus.corpus_files(sources, FileHashes(None)), "corpus file")
    if changes:
        shutil.rmtree(directory, ignore_errors=True)
        more = f" (and {len(changes) - 3} more)" if len(changes) > 3 else ""
        raise corpus.CorpusError(f"the corpus changed while its words were counted: {'; '.join(changes[:3])}{more} "
                                 "since it was listed; nothing of this count is kept: run the same command once its "
                                 "files stop changing")


def _why_count_again(root: pathlib.Path, made_from: dict) -> str | None:
    """What differs between the corpus about to be counted and the closest one counted under `root` (the
    fewest differences), in one phrase; None where none is counted there yet."""
    compared, earlier = [], None
    for index in sorted(root.glob("corpus-*/index.json")):
        try:
            before = json.loads(index.read_text()).get("made_from")
        except (OSError, ValueError, AttributeError):
            continue
        if not isinstance(before, dict):
            earlier = index.parent.name
            continue
        changes = differences(before.get("files", {}), made_from["files"], "corpus file")
        settings = before.get("settings", {})
        changes += [f"{_SETTING_NAMES.get(key, 'data.' + key)} {settings.get(key)!r} -> {value!r}"
                    for key, value in made_from["settings"].items() if settings.get(key) != value]
        compared.append(changes or [f"{index.parent.name} holds the same files and settings"])
    if compared:
        closest = min(compared, key=len)
        return "; ".join(closest[:3]) + (f" (and {len(closest) - 3} more)" if len(closest) > 3 else "")
    if earlier:
        return (f"the counted corpus {earlier} is keyed by its files' places and dates (an earlier version of "
                "babylm_jax); counted corpora are now keyed by the files' content")
    return None


def _remove_damaged_shards(directory: pathlib.Path) -> bool:
    """Checks the counted shards against the sizes and checksums in index.json; removes damaged
    shards (and the index, so they are counted again) with a warning naming them. True if any."""
    index_path = directory / "index.json"
    try:
        recorded = json.loads(index_path.read_text()).get("files")
    except (ValueError, AttributeError):
        logging.warning("%s is damaged; counting the shards it lists again where they are not whole", index_path)
        index_path.unlink()
        return True
    if recorded is None:  # counted before checksums were recorded
        return False
    damaged = problems(directory / "shards", recorded)
    if not damaged:
        return False
    for name, problem in damaged.items():
        logging.warning("counted corpus shard damaged (%s); counting it again", problem)
        shutil.rmtree(directory / "shards" / name.split("/")[0], ignore_errors=True)
    index_path.unlink()
    return True

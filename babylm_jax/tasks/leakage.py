"""Evaluation-leakage check: which evaluation sentences occur in the training corpus.

Two tests, both with 64-bit polynomial hashes computed in numpy (no pairwise comparison):
- exact: a training sentence equals an evaluation sentence (both normalised, whitespace
  removed, split at sentence-final punctuation and line breaks; sentences of at least
  `EXACT_MIN_CHARS` characters);
- n-gram: a training line shares a character n-gram (default 13) with an evaluation item.
Evaluation items come from the task files under a data directory (see `iter_eval_items`).
"""
from __future__ import annotations

import pathlib
import re
from typing import Iterator

import numpy as np
import tqdm

from babylm_jax.core.text import Normalizer
from babylm_jax.tasks import layout
from babylm_jax.tasks.readers import eval_texts, has_texts
from babylm_jax.tasks.registry import get_task, official_clue_task, task_of_folder
from babylm_jax.core.workers import chunks_by_chars

EXACT_MIN_CHARS = 6
_BASE = np.uint64(0x100000001B3)
_BASE_INV = np.uint64(pow(0x100000001B3, -1, 1 << 64))
_SEPARATORS = np.array([ord(c) for c in "\n。！？!?；;…"], dtype=np.uint64)
_WHITESPACE = re.compile(r"[^\S\n]+")

def _task_files(folder: pathlib.Path) -> list[pathlib.Path]:
    return sorted(
        p for p in folder.rglob("*")
        if p.is_file() and p.suffix in (".json", ".jsonl") and "excluded" not in str(p.relative_to(folder)).lower()
    )


def iter_eval_items(data_dir: str | pathlib.Path) -> Iterator[tuple[str, str]]:
    """(task, text) for every evaluation text found under `data_dir`.

    Every .json/.jsonl file of a task folder (the registry's `task_of_folder`) is read by its
    task's reader (`readers.eval_texts`: the minimal pairs' sentences, the fine-tuning rows'
    texts, c3's paragraphs). Folders named *excluded* are skipped. The official layout's
    full_eval/ folders are read too (`tasks.layout`), full_eval/clue/ file by file.
    """
    data_dir = pathlib.Path(data_dir)
    if not data_dir.is_dir():
        raise FileNotFoundError(f"Evaluation data directory not found: {data_dir}")
    for task, folder in layout.task_folders(data_dir):
        official_clue = task == "clue" and folder.parent.name == "full_eval"
        if not (official_clue or has_texts(task_of_folder(task))):
            continue
        for path in _task_files(folder):
            name = official_clue_task(path) if official_clue else task
            if name:
                spec = get_task(name) if official_clue else task_of_folder(task)
                yield from ((name, text) for text in eval_texts(spec, path))


def _codes(text: str) -> np.ndarray:
    """Code points (uint64) of `text` with spaces and tabs removed (line breaks kept)."""
    return np.frombuffer(_WHITESPACE.sub("", text).encode("utf-32-le"), dtype=np.uint32).astype(np.uint64)


def _prefix_tables(codes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(powers, scaled prefix sums) so that hash(s, e) = powers[e] * (prefix[e] - prefix[s])."""
    n = len(codes)
    with np.errstate(over="ignore"):
        powers = np.cumprod(np.concatenate([[np.uint64(1)], np.full(n, _BASE, np.uint64)]), dtype=np.uint64)
        inv_powers = np.cumprod(np.full(n, _BASE_INV, np.uint64), dtype=np.uint64)  # BASE^-(j+1)
        prefix = np.concatenate([[np.uint64(0)], np.cumsum((codes + np.uint64(1)) * inv_powers, dtype=np.uint64)])
    return powers, prefix


def _span_hashes(powers: np.ndarray, prefix: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        return powers[ends] * (prefix[ends] - prefix[starts])


def text_hashes(text: str, ngram: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(sentence hashes, sentence line index, n-gram hashes, n-gram line index) of `text`.

    Line index = which line of `text` each sentence / n-gram lies in.
    """
    codes = _codes(text)
    powers, prefix = _prefix_tables(codes)
    is_separator = np.isin(codes, _SEPARATORS)
    is_newline = codes == ord("\n")
    line_of = np.cumsum(is_newline) - is_newline  # line index of each character
    cut = np.flatnonzero(is_separator)
    starts = np.concatenate([[0], cut + 1])
    ends = np.concatenate([cut, [len(codes)]])
    keep = ends - starts >= EXACT_MIN_CHARS
    sentences = _span_hashes(powers, prefix, starts[keep], ends[keep])
    sentence_line = line_of[starts[keep]] if len(codes) else np.zeros(0, np.int64)
    # n-grams that do not cross a line break
    newline_before = np.concatenate([[0], np.cumsum(is_newline)])
    gram_starts = np.arange(max(len(codes) - ngram + 1, 0))
    clean = newline_before[gram_starts + ngram] == newline_before[gram_starts]
    gram_starts = gram_starts[clean]
    grams = _span_hashes(powers, prefix, gram_starts, gram_starts + ngram)
    return sentences, sentence_line, grams, line_of[gram_starts]


def _joined_hashes(texts: list[str], ngram: int):
    """Hashes of many texts at once (joined by line breaks) with the text index of each hash."""
    sentences, sentence_line, grams, gram_line = text_hashes("\n".join(texts), ngram)
    lines_per_text = np.fromiter((t.count("\n") + 1 for t in texts), dtype=np.int64, count=len(texts))
    text_of_line = np.repeat(np.arange(len(texts)), lines_per_text)
    return sentences, text_of_line[sentence_line], grams, text_of_line[gram_line], sentence_line, gram_line


class LeakDetector:
    """Hash sets of the evaluation items; also the line filter used to drop leaked lines."""

    def __init__(self, items: list[tuple[str, str]], ngram: int, normalize: Normalizer):
        self.ngram = ngram
        self.normalize = normalize
        self.tasks = sorted({task for task, _ in items})
        self.item_task = np.asarray([self.tasks.index(task) for task, _ in items], dtype=np.int64)
        texts = [self.normalize(text) for _, text in items]
        sentences, self.sentence_item, grams, self.gram_item, _, _ = _joined_hashes(texts, ngram)
        self.item_sentences, self.item_grams = sentences, grams
        self.sentence_set, self.gram_set = np.unique(sentences), np.unique(grams)
        self._sentence_filter, self._gram_filter = _top_bits_table(self.sentence_set), _top_bits_table(self.gram_set)
        self.fingerprint = {"ngram": ngram, "items": len(items), "sentences": _digest(self.sentence_set), "grams": _digest(self.gram_set)}

    @classmethod
    def from_data_dir(cls, data_dir, ngram: int, normalize: Normalizer) -> "LeakDetector":
        return cls(list(iter_eval_items(data_dir)), ngram, normalize)

    def keep_lines(self, lines: list[str]) -> np.ndarray:
        """[lines] bool: True for (normalised) lines that share nothing with the evaluation items."""
        sentences, sentence_line, grams, gram_line, _, _ = _joined_hashes(lines, self.ngram)
        keep = np.ones(len(lines), bool)
        keep[sentence_line[_member(sentences, self.sentence_set, self._sentence_filter)]] = False
        keep[gram_line[_member(grams, self.gram_set, self._gram_filter)]] = False
        return keep

    def report(self, texts, total_chars: int | None = None, batch_chars: int = 1_000_000) -> dict:
        """Scans training `texts` (in batches, a bar over `total_chars`); counts leaked evaluation items per task."""
        found_sentences, found_grams = [], []
        lines_hit = documents_hit = 0
        bar = tqdm.tqdm(total=total_chars, desc="leakage check", unit="char", unit_scale=True, leave=False)
        for batch in chunks_by_chars(texts, len, batch_chars):
            bar.update(sum(map(len, batch)))
            sentences, sentence_doc, grams, gram_doc, sentence_line, gram_line = _joined_hashes(batch, self.ngram)
            sentence_hit = _member(sentences, self.sentence_set, self._sentence_filter)
            gram_hit = _member(grams, self.gram_set, self._gram_filter)
            found_sentences.append(sentences[sentence_hit])
            found_grams.append(grams[gram_hit])
            lines_hit += len(np.union1d(sentence_line[sentence_hit], gram_line[gram_hit]))
            documents_hit += len(np.union1d(sentence_doc[sentence_hit], gram_doc[gram_hit]))
        bar.close()
        found_sentences = np.unique(np.concatenate(found_sentences)) if found_sentences else np.zeros(0, np.uint64)
        found_grams = np.unique(np.concatenate(found_grams)) if found_grams else np.zeros(0, np.uint64)
        exact_items = np.unique(self.sentence_item[_member(self.item_sentences, found_sentences)])
        gram_items = np.unique(self.gram_item[_member(self.item_grams, found_grams)])
        leaked_items = np.union1d(exact_items, gram_items)
        count = lambda items: np.bincount(self.item_task[items], minlength=len(self.tasks))  # noqa: E731
        totals, exact, gram, leaked = count(np.arange(len(self.item_task))), count(exact_items), count(gram_items), count(leaked_items)
        return {
            "ngram": self.ngram,
            "exact_min_chars": EXACT_MIN_CHARS,
            "training_lines_hit": int(lines_hit),
            "training_documents_hit": int(documents_hit),
            "tasks": {
                task: {"items": int(totals[t]), "exact": int(exact[t]), "ngram": int(gram[t]), "leaked": int(leaked[t])}
                for t, task in enumerate(self.tasks)
            },
        }


_FILTER_BITS = 24  # a 16 MB table of the top 24 bits of the set's hashes: most misses end there


def _member(values: np.ndarray, sorted_set: np.ndarray, top_bits: np.ndarray | None = None) -> np.ndarray:
    """values in sorted_set; `top_bits` (from `_top_bits_table(sorted_set)`) first rules out most misses."""
    if not len(sorted_set):
        return np.zeros(len(values), bool)
    if top_bits is None:
        index = np.minimum(np.searchsorted(sorted_set, values), len(sorted_set) - 1)
        return sorted_set[index] == values
    hit = top_bits[values >> np.uint64(64 - _FILTER_BITS)]
    hit[hit] = _member(values[hit], sorted_set)
    return hit


def _top_bits_table(sorted_set: np.ndarray) -> np.ndarray:
    """[2^24] bool: some hash of the set has these top bits."""
    table = np.zeros(1 << _FILTER_BITS, bool)
    table[sorted_set >> np.uint64(64 - _FILTER_BITS)] = True
    return table


def _digest(values: np.ndarray) -> str:
    import hashlib

    return hashlib.sha256(values.tobytes()).hexdigest()[:16]

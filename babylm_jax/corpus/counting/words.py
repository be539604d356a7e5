"""Official word count: `len(list(jieba.cut(text)))` per document (jieba 0.42.1, default mode)."""
from __future__ import annotations

import logging

import numpy as np

_READY = False


def init_jieba() -> None:
    """Loads jieba's dictionary once per process, quietly."""
    global _READY
    if not _READY:
        import jieba

        jieba.setLogLevel(logging.WARNING)
        jieba.initialize()
        _READY = True


def jieba_words(text: str) -> list[str]:
    """The official segmentation of one training sample."""
    import jieba

    init_jieba()
    return list(jieba.cut(text))


def word_start_mask(words: list[str]) -> np.ndarray:
    """[characters] bool: True at the first character of each word of `words` (joined)."""
    return start_mask([len(w) for w in words])


def start_mask(word_lengths: list[int]) -> np.ndarray:
    """[characters] bool: True at the first character of each word, from the words' lengths in order."""
    lengths = np.asarray(word_lengths, dtype=np.int64)
    mask = np.zeros(int(lengths.sum()), dtype=bool)
    starts = np.cumsum(lengths) - lengths
    mask[starts[lengths > 0]] = True
    return mask

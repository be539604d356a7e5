"""Official word count: `len(list(jieba.cut(text)))` per document (jieba 0.42.1, default mode)."""
from __future__ import annotations

import logging

import numpy as np

_READY = False
JIEBA_VERSION = "0.42.1"  # the official count's jieba


class JiebaLoadError(ImportError):
    """jieba could not be imported or its dictionary not loaded; the message names the error and the fix."""


def init_jieba() -> None:
    """Loads jieba's dictionary once per process, quietly; JiebaLoadError names what went wrong."""
    global _READY
    if _READY:
        return
    try:
        import jieba

        jieba.setLogLevel(logging.WARNING)
        jieba.initialize()
    except Exception as error:  # noqa: BLE001 - a broken install raises anything; said as what it is
        text = " ".join(str(error).split())
        raise JiebaLoadError(f"loading jieba failed ({type(error).__name__}: {text}); the official word count "
                             f"needs jieba {JIEBA_VERSION}: pip install jieba=={JIEBA_VERSION}") from error
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

